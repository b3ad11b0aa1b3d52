/// A bounded wait in a test that ran out (or whose subject gave up first); the
/// description says what was awaited and what was seen instead.
public struct TimedOut: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}
