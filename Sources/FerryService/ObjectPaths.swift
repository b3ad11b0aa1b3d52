import FerryInterface

/// Names of the bus API (the contract's "Names" table): the shared declaration in
/// `FerryInterface`, under the name the service has always used.
