// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Ferry",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "ferryd", targets: ["ferryd"]),
        .executable(name: "ferry", targets: ["ferry"]),
        .library(name: "FerryClient", targets: ["FerryClient"]),
        .library(name: "FerryBusClient", targets: ["FerryBusClient"]),
        .library(name: "DBus", targets: ["DBus"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        // `swift package generate-documentation --target FerryClient` (DocC); a plugin only.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // C libraries, as Debian's -dev packages ship them.
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),

        // Our libdbus binding; knows nothing of Ferry.
        .target(name: "DBus", dependencies: ["CDBus"]),

        // Concurrency primitives every layer shares (the lock-and-batch inbox).
        .target(name: "FerryConcurrency"),

        // The bus API's names (bus name, paths, interfaces, error names), declared once.
        .target(name: "FerryInterface"),
        // What a Metalink 4 document (RFC 5854) says about its file, and why one was refused (no XML here).
        .target(name: "FerryMetalink"),
        // The Metalink 4 parser (FoundationXML, libxml2): only in ferry-metalink-reader, the
        // process ferryd reads a fetched document with, and in the tests.
        .target(name: "FerryMetalinkParser", dependencies: ["FerryMetalink"]),
        // The reader's seccomp filter (C: the kernel's BPF macros).
        .target(name: "CReaderConfinement"),
        .executableTarget(name: "ferry-metalink-reader", dependencies: ["FerryMetalink", "FerryMetalinkParser", "CReaderConfinement"]),
        // The domain: sessions, transfers, scheduler, events. No C modules.
        .target(name: "FerryCore", dependencies: [
            "FerryConcurrency", "FerryInterface", "FerryMetalink",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "HeapModule", package: "swift-collections"),
        ]),
        // libcurl multi on one engine thread.
        .target(name: "FerryEngine", dependencies: [
            "CCurl", "FerryConcurrency", "FerryCore", "FerryInterface",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Crypto", package: "swift-crypto"),
        ]),
        // The durable store: SQLite (through GRDB) under $XDG_STATE_HOME/ferry.
        .target(name: "FerryStore", dependencies: [
            "FerryCore",
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // D-Bus adapters: org.ferry.Ferry1 objects over the core.
        .target(name: "FerryService", dependencies: [
            "DBus", "FerryCore", "FerryInterface",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Desktop integration: the batch notification through libnotify on its own GLib
        // thread. libnotify is loaded (dlopen) by the first notification, not linked.
        .target(name: "FerryDesktop", dependencies: [
            "FerryCore",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The system bus: NetworkManager's metered/online state, logind's sleep inhibitor;
        // and the desktop portal's proxy settings (session bus).
        .target(name: "FerrySystem", dependencies: [
            "DBus", "FerryCore", "FerryInterface",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // A typed view of the bus API in bus terms (object paths, DBusValue options),
        // for tests and tools that speak D-Bus.
        .target(name: "FerryBusClient", dependencies: ["DBus", "FerryInterface"]),
        // The Swift client library: URLSession's background API over the bus; no D-Bus types in its API.
        .target(name: "FerryClient", dependencies: ["FerryBusClient", "DBus", "FerryInterface"]),
        .executableTarget(name: "ferryd", dependencies: [
            "FerryService", "FerryEngine", "FerryCore", "FerryStore", "FerryDesktop", "FerrySystem", "FerryInterface",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Examples/: a command-line app on FerryClient that queues, exits, and collects on relaunch (built by `swift build`, run by the tests).
        .executableTarget(name: "ferry-queue-and-collect", dependencies: ["FerryClient"], path: "Examples/QueueAndCollect"),
        .executableTarget(name: "ferry", dependencies: [
            "FerryClient", "FerryBusClient", "FerryInterface",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),

        // A loopback HTTP server for tests: ranges, ETags, stalls, drops, errors.
        // Also the pieces the bus-level test targets share: ferryd's binary, a temporary
        // HOME, a signal recorder, waiting for a bus name.
        .target(name: "FerryTestSupport", dependencies: [
            "DBus", "FerryBusClient", .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "Crypto", package: "swift-crypto"),
        ]),

        .testTarget(name: "FerryMetalinkTests", dependencies: ["FerryMetalink", "FerryMetalinkParser"]),
        .testTarget(name: "FerryConcurrencyTests", dependencies: ["FerryConcurrency"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "FerryTestSupport"]),
        // The one fake engine the core's unit tests (and the store's and desktop's) share.
        .target(name: "FerryCoreTestSupport", dependencies: ["FerryCore"], path: "Sources/FerryCoreTestSupport"),
        .testTarget(name: "FerryCoreTests", dependencies: ["FerryCore", "FerryInterface", "FerryMetalink", "FerryMetalinkParser", "FerryCoreTestSupport", "FerryTestSupport"]),
        .testTarget(name: "FerryStoreTests", dependencies: [
            "FerryStore", "FerryCore", "FerryCoreTestSupport", "FerryTestSupport",
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "FerryEngineTests", dependencies: [
            "FerryEngine", "FerryCore", "FerryInterface", "FerryTestSupport", .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "IntegrationTests", dependencies: ["FerryClient", "FerryBusClient", "FerryInterface", "DBus", "FerryTestSupport"]),
        // NetworkManager and logind from python-dbusmock on a private system bus, with the real ferryd.
        .testTarget(name: "SystemTests", dependencies: ["FerrySystem", "FerryCore", "FerryBusClient", "DBus", "FerryTestSupport"]),
        .testTarget(name: "DesktopTests", dependencies: ["FerryCoreTestSupport", "FerryService", "FerryDesktop", "FerryCore", "FerryBusClient", "DBus", "FerryTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
