import Foundation

/// Finds the executables this package builds (`ferryd`, `ferry`) for tests that run them.
public enum BuiltProducts {
    /// The package root: this file is `Sources/FerryTestSupport/BuiltProducts.swift`.
    private static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The path of the built executable `name`: the environment variable `variable`
    /// when it is set (nil if that is not executable), else beside the bundle of
    /// `anchor` (a class of the test target) or the main bundle (the build's bin
    /// directory), else in `<package>/<dir>/debug` for each of `buildDirectories`,
    /// in order.
    public static func locate(_ name: String, variable: String, besideBundleOf anchor: AnyClass,
                              buildDirectories: [String] = [".build"]) -> String? {
        let fm = FileManager.default
        if let p = ProcessInfo.processInfo.environment[variable], !p.isEmpty {
            return fm.isExecutableFile(atPath: p) ? p : nil
        }
        var dirs: [URL] = []
        for bundle in [Bundle(for: anchor), Bundle.main] {
            dirs.append(bundle.bundleURL)
            dirs.append(bundle.bundleURL.deletingLastPathComponent())
            if let exe = bundle.executableURL { dirs.append(exe.deletingLastPathComponent()) }
        }
        for build in buildDirectories {
            dirs.append(packageRoot.appendingPathComponent(build).appendingPathComponent("debug"))
        }
        return dirs.map { $0.appendingPathComponent(name).path }.first { fm.isExecutableFile(atPath: $0) }
    }
}
