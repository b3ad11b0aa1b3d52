import CDBus
import Glibc

// Unix file descriptors (`h`): who owns what.
//
// A received descriptor is a duplicate made for the reader (see `DBusValue.unixFD`),
// so code that reads a message's values and does not hand them on must close the
// descriptors in them, or they leak.

extension DBusValue {
    /// Every file descriptor in this value, at any depth.
    public var unixFDs: [Int32] {
        var out: [Int32] = []
        collectUnixFDs(into: &out)
        return out
    }

    private func collectUnixFDs(into out: inout [Int32]) {
        switch self {
        case .unixFD(let fd): out.append(fd)
        case .array(let element, let items):
            // Only element types that can hold an `h` need a look.
            if element.contains("h") || element.contains("v") { for i in items { i.collectUnixFDs(into: &out) } }
        case .dictionary(_, _, let entries):
            for e in entries {
                e.key.collectUnixFDs(into: &out)
                e.value.collectUnixFDs(into: &out)
            }
        case .structure(let fields): for f in fields { f.collectUnixFDs(into: &out) }
        case .variant(let inner): inner.collectUnixFDs(into: &out)
        default: break
        }
    }

    /// Closes every file descriptor in `values`: for received values the receiver
    /// does not keep.
    public static func closeUnixFDs(in values: [DBusValue]) {
        for v in values {
            for fd in v.unixFDs where fd >= 0 { Glibc.close(fd) }
        }
    }
}

extension BusConnection {
    /// Whether this connection can carry file descriptors (a Unix socket whose peer
    /// agreed to it). Sending an `h` over one that cannot fails.
    public var canPassUnixFDs: Bool {
        dbus_connection_can_send_type(raw, TypeCode.unixFD) != 0
    }
}
