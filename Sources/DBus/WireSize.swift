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
        alignment(ofTypeCode: signature.utf8.first ?? UInt8(ascii: "a"))
    }

    /// The alignment of a type that starts with `code`.
    static func alignment(ofTypeCode code: UInt8) -> Int {
        switch code {
        case UInt8(ascii: "y"), UInt8(ascii: "g"), UInt8(ascii: "v"): return 1
        case UInt8(ascii: "n"), UInt8(ascii: "q"): return 2
        case UInt8(ascii: "x"), UInt8(ascii: "t"), UInt8(ascii: "d"), UInt8(ascii: "("), UInt8(ascii: "{"): return 8
        default: return 4  // b i u s o a h
        }
    }

    /// Whether `code` is a basic type's (one character, no container).
    static func isBasicTypeCode(_ code: UInt8) -> Bool {
        "ybnqiuxtdsogh".utf8.contains(code)
    }
}
