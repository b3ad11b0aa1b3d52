import Dispatch
import FerryMetalink
import Foundation

/// Reads fetched Metalink documents off the core's queue: a document of up to 4 MiB
/// (tens of thousands of piece hashes) takes the XML parser a good part of a second, and
/// the core's queue answers every client meanwhile. ferryd's is a `MetalinkReadQueue`;
/// core tests put in one they can hold.
public protocol MetalinkReading: AnyObject, Sendable {
    /// Parses `data`, off the caller's thread, then calls `done` once (on any thread).
    func read(_ data: Data, done: @escaping @Sendable (Result<Metalink, MetalinkError>) -> Void)
}

/// ferryd's `MetalinkReading`: one document after another on a serial queue of its own
/// (not a concurrent one: see `FileJobQueues` in FerryEngine on libdispatch's worker pool).
public final class MetalinkReadQueue: MetalinkReading {
    private let queue = DispatchQueue(label: "org.ferry.metalink-documents", qos: .utility)

    public init() {}

    public func read(_ data: Data, done: @escaping @Sendable (Result<Metalink, MetalinkError>) -> Void) {
        queue.async { done(Self.parse(data)) }
    }

    /// The document, or why it cannot be used.
    public static func parse(_ data: Data) -> Result<Metalink, MetalinkError> {
        do {
            return .success(try MetalinkParser.parse(data))
        } catch let error as MetalinkError {
            return .failure(error)
        } catch {
            return .failure(MetalinkError(.malformed, "the Metalink document could not be read: \(error)"))
        }
    }
}
