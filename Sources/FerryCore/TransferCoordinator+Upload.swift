import Foundation

extension TransferCoordinator {
    /// Checks an `Upload` call's session, URL and source file. Uploads are not run
    /// by this version; this lets a client learn about a bad argument (a
    /// missing file: `FileNotFound`) rather than only that uploads are missing.
    public func checkUpload(session: SessionID, url: String, file: String) throws {
        dispatchPrecondition(condition: .onQueue(queue))
        _ = try sessionRecord(session)
        _ = try RequestURL.validate(url)
        guard file.hasPrefix("/") else {
            throw FerryError.invalidArgument("the file to upload must be an absolute path, not '\(file)'")
        }
        var isDirectory: ObjCBool = false
        guard fileManager.fileExists(atPath: file, isDirectory: &isDirectory), !isDirectory.boolValue else {
            throw FerryError.fileNotFound("there is no file at \(file) to upload")
        }
        guard fileManager.isReadableFile(atPath: file) else {
            throw FerryError.fileNotFound("\(file) cannot be read (permission denied)")
        }
    }
}
