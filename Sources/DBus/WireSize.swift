/// The protocol's size limits. A message the bus cannot carry is refused before it is
/// built (`WireWriter` counts its bytes): the bus disconnects a sender whose message
/// breaks them, and a service that loses its bus stops serving everyone.
public enum WireLimits {
    /// The largest message the protocol allows (header and body): 128 MiB.
    public static let maximumMessageBytes = 128 * 1024 * 1024
    /// The largest array (its elements' bytes): 64 MiB.
    public static let maximumArrayBytes = 64 * 1024 * 1024
    /// Room kept for the header fields (paths, names, signature) of a message.
    static let headerAllowance = 64 * 1024

    /// The alignment of a complete type by its first character.
    static func alignment(of signature: Substring) -> Int {
        switch signature.first {
        case "y", "g", "v": return 1
        case "n", "q": return 2
        case "x", "t", "d", "(", "{": return 8
        default: return 4  // b i u s o a h
        }
    }
}
