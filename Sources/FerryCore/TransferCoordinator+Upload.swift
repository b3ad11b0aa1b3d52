import Foundation

extension SegmentMap: Hashable {
    public func hash(into hasher: inout Hasher) {
        hasher.combine(total)
        for range in done { hasher.combine(range.lowerBound); hasher.combine(range.upperBound) }
    }
}

extension TransferCoordinator {
    /// Form fields (`form-values`) an upload may carry, and their sizes.
    static let maxFormValues = 64

    /// Queues an upload of `file` (an absolute path) or, with `sourceFD`, of the file
    /// behind that descriptor (`file` must then be ""). The file is opened now: a
    /// missing or unreadable one is refused at once. With `sourceFD` the core owns the
    /// descriptor from this call on (it is closed when refused, or when the transfer no
    /// longer needs it).
    /// - Throws: `.noSuchSession`, `.invalidState` (session closing), `.invalidUrl`,
    ///   `.unsupportedScheme`, `.invalidArgument` (options, a relative path),
    ///   `.fileNotFound`, `.invalidDestination` (`response-destination`).
    public func upload(session: SessionID, url: String, file: String, options: UploadOptions,
                       sourceFD: Int32? = nil) throws -> TransferID {
        dispatchPrecondition(condition: .onQueue(queue))
        commitWaiting()
        var source: EngineUpload?
        var handedOver = false
        defer {
            // Refused: the opened file, or the caller's descriptor, is closed here.
            if !handedOver {
                if let source { source.closeSource() } else if let sourceFD { close(sourceFD) }
            }
        }
        _ = try openSessionRecord(session)
        if let full = uploadSourceRoomMissing(for: sessions[session]?.owner) {
            throw CoreError.limitExceeded(full + "; queue more once some have finished")
        }
        let requestURL = try validateRequestURL(url)
        try Self.validate(options)
        let responseDestination = try options.responseDestination.map(validateResponseDestination)
        if let sourceFD {
            guard file.isEmpty else {
                throw CoreError.invalidArgument("give either a file path or 'source-fd', not both (the file argument must be \"\" with source-fd)")
            }
            source = try Self.describeSource(fd: sourceFD)
        } else {
            guard file.hasPrefix("/") else {
                throw CoreError.invalidArgument("the file to upload must be an absolute path, not '\(file)'")
            }
            let owner = sessions[session]?.owner
            do {
                source = try EngineUpload.open(path: FileSystemChecks.normalize(file))
            } catch let error as CoreError {
                // A sandboxed app learns nothing of files outside its directory: a path
                // that leads outside now (a link flipped since the service's check)
                // is refused as one that does not, whether the file is there or not.
                if let owner, !SandboxArea(appID: owner).contains(FileSystemChecks.normalize(file)) {
                    throw Self.outsideArea(owner)
                }
                throw error
            }
            if let owner, let opened = source { try Self.confine(opened, to: owner) }
        }
        guard let opened = source else { throw CoreError.fileNotFound("the file to upload cannot be opened") }
        let spec = UploadSpec(method: options.method, contentType: options.contentType, formField: options.formField,
                              formValues: options.formValues, responseDestination: responseDestination,
                              size: opened.size, modificationTime: opened.modificationTime,
                              fromDescriptor: sourceFD != nil)
        var common = DownloadOptions()
        common.headers = options.headers
        common.description = options.description
        common.start = options.start
        common.discretionary = options.discretionary
        let id = try mutate {
            let id = numbering.nextTransferID
            let snapshot = TransferSnapshot(id: id, session: session, kind: .upload, url: url,
                                            description: options.description,
                                            destination: sourceFD == nil ? FileSystemChecks.normalize(file) : "",
                                            state: .queued, bytesExpected: opened.size, created: environment.now())
            let t = TransferRecord(snapshot: snapshot, life: initialLife(common), options: common, host: requestURL.host,
                                   directory: "", serverMayName: false)
            t.upload = spec
            t.uploadSource = opened
            do {
                try persistNew(t)
            } catch {
                t.uploadSource = nil
                throw error
            }
            add(t)
            handedOver = true
            countUploadSource(of: sessions[session]?.owner, by: 1)
            return id
        }
        return id
    }

    /// The rules for upload options.
    static func validate(_ options: UploadOptions) throws {
        guard options.method == "PUT" || options.method == "POST" else {
            throw CoreError.invalidArgument("option 'method' must be PUT or POST, not '\(options.method)'")
        }
        if options.formField != nil && options.method != "POST" {
            throw CoreError.invalidArgument("option 'form-field' needs method POST (a multipart/form-data body)")
        }
        if !options.formValues.isEmpty && options.formField == nil {
            throw CoreError.invalidArgument("option 'form-values' needs 'form-field' (they are parts of a multipart/form-data body)")
        }
        try Limits.check(options.description, max: Limits.descriptionBytes, what: "the description")
        try HeaderFields.validate(options.headers)
        if options.headers.keys.contains(where: { HeaderFields.uploadBody.contains($0.lowercased()) }) {
            throw CoreError.invalidArgument("an upload's Content-Type is its option 'content-type' (with 'form-field', the file "
                + "part's; the body is multipart/form-data), not a 'headers' entry")
        }
        guard options.formValues.count <= maxFormValues else {
            throw CoreError.limitExceeded("\(options.formValues.count) form values; at most \(maxFormValues) are accepted")
        }
        for (name, value) in options.formValues {
            try checkFormText(name, max: 256, what: "a form-values name")
            try checkFormText(value, max: Limits.headerValueBytes, what: "the form value '\(name)'", allowEmpty: true)
            guard !name.contains("\"") else {
                throw CoreError.invalidArgument("a form-values name may not contain '\"'")
            }
        }
        if let field = options.formField {
            try checkFormText(field, max: 256, what: "option 'form-field'")
            guard !field.contains("\"") else { throw CoreError.invalidArgument("option 'form-field' may not contain '\"'") }
        }
        if let type = options.contentType { try checkFormText(type, max: Limits.headerValueBytes, what: "option 'content-type'") }
    }

    private static func checkFormText(_ text: String, max: Int, what: String, allowEmpty: Bool = false) throws {
        guard allowEmpty || !text.isEmpty else { throw CoreError.invalidArgument("\(what) is empty") }
        try Limits.check(text, max: max, what: what)
        guard !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw CoreError.invalidArgument("\(what) contains a line break or another control character")
        }
    }

    /// `response-destination`: an absolute file path in a writable directory (not a
    /// directory itself); returns it normalised.
    private func validateResponseDestination(_ path: String) throws -> String {
        try Limits.checkPath(path, what: "the response-destination")
        guard path.hasPrefix("/") else {
            throw CoreError.invalidDestination("response-destination must be an absolute path, not '\(path)'")
        }
        let normalized = FileSystemChecks.normalize(path)
        var isDirectory: ObjCBool = false
        if fileManager.fileExists(atPath: normalized, isDirectory: &isDirectory), isDirectory.boolValue {
            throw CoreError.invalidDestination("response-destination '\(normalized)' is a directory; give a file path")
        }
        var st = stat()
        if lstat(normalized, &st) == 0, st.st_mode & S_IFMT != S_IFREG {
            throw CoreError.invalidDestination("response-destination '\(normalized)' exists and is not a regular file (a link, FIFO or device); give a file path")
        }
        try FileSystemChecks.requireWritableDirectory(FileSystemChecks.directoryName(normalized),
                                                      role: "response-destination's directory")
        return normalized
    }

    /// `O_PATH` (Linux; not in Swift's Glibc module): a descriptor that names a file but
    /// cannot read it.
    private static let openPathFlag: Int32 = 0o10000000

    /// A `source-fd`: an open, readable regular file.
    private static func describeSource(fd: Int32) throws -> EngineUpload {
        var st = stat()
        guard fd >= 0, fstat(fd, &st) == 0 else { throw CoreError.invalidArgument("source-fd is not an open file descriptor") }
        guard st.st_mode & S_IFMT == S_IFREG else { throw CoreError.invalidArgument("source-fd must be a regular file") }
        let mode = fcntl(fd, F_GETFL)
        guard mode >= 0, mode & O_ACCMODE != O_WRONLY, mode & openPathFlag == 0 else {
            throw CoreError.invalidArgument("source-fd is not open for reading")
        }
        return EngineUpload(fd: fd, size: Int64(st.st_size), modificationTime: EngineUpload.nanoseconds(st.st_mtim),
                            device: UInt64(st.st_dev))
    }

    // MARK: - Attempts

    /// A sandboxed application's source file, as opened: its real path (read back from
    /// the descriptor, so a link flipped after the call's check changes nothing) must be
    /// inside the app's directory. The caller closes it when this throws.
    static func confine(_ source: EngineUpload, to owner: String) throws {
        guard SandboxArea(appID: owner).holds(source.fd) else { throw outsideArea(owner) }
    }

    private static func outsideArea(_ owner: String) -> CoreError {
        .accessDenied("a sandboxed application may upload only files inside its own directory "
            + "'\(SandboxArea(appID: owner).root)/'; pass the file as 'source-fd' instead")
    }

    /// Before an upload's attempt: its source is open and is the file the client
    /// asked for (reopened from its path after a restart); else why it cannot go.
    func uploadSourceRefusal(_ t: TransferRecord) -> CoreError? {
        guard let spec = t.upload else { return nil }
        if t.uploadSource == nil {
            if spec.fromDescriptor {
                return .fileNotFound("its source-fd was lost when ferryd restarted; start the upload again with a new descriptor")
            }
            // Reopened files count as those opened at the call: no restart makes room for more.
            if let full = uploadSourceRoomMissing(for: sessions[t.session]?.owner) {
                return .disk(full + "; resume this upload once some have finished")
            }
            do {
                let reopened = try EngineUpload.open(path: t.destination)
                if let owner = sessions[t.session]?.owner {
                    do {
                        try Self.confine(reopened, to: owner)
                    } catch {
                        reopened.closeSource()
                        // A transfer failure, as any other place a folder swap leads outside.
                        return .disk("\(t.destination) is no longer inside the application's directory "
                            + "'\(SandboxArea(appID: owner).root)/' (a folder on the way was swapped for a link); nothing was sent")
                    }
                }
                t.uploadSource = reopened
                countUploadSource(of: sessions[t.session]?.owner, by: 1)
            } catch let error as CoreError {
                return error
            } catch {
                return .fileNotFound("\(t.destination) cannot be opened: \(error)")
            }
        }
        guard let source = t.uploadSource else { return nil }
        var st = stat()
        guard fstat(source.fd, &st) == 0 else { return .fileNotFound("the file to upload cannot be read any more") }
        if Int64(st.st_size) != spec.size || EngineUpload.nanoseconds(st.st_mtim) != spec.modificationTime {
            let what = t.destination.isEmpty ? "the file behind source-fd" : t.destination
            return .fileNotFound("\(what) changed after the upload was queued (it was \(spec.size) bytes, now \(st.st_size), "
                + "or it was modified); nothing of the new contents was sent. Start a new upload to send it")
        }
        return nil
    }

    /// The engine's description of an upload's body.
    func engineUpload(_ t: TransferRecord) -> EngineUpload? {
        guard let spec = t.upload, let source = t.uploadSource else { return nil }
        let body: EngineUpload.Body = spec.formField.map { field in
            .multipart(field: field, fields: spec.formValues.sorted { $0.key < $1.key }
                .map { EngineUpload.FormField(name: $0.key, value: $0.value) })
        } ?? .raw
        let name = t.destination.isEmpty ? "file" : FileSystemChecks.baseName(t.destination)
        return EngineUpload(fd: source.fd, size: spec.size, modificationTime: spec.modificationTime,
                            device: source.device, method: spec.method,
                            body: body, fileName: name.isEmpty ? "file" : name, contentType: spec.contentType,
                            responseDestination: spec.responseDestination)
    }

    /// An upload's answer is in: the status and the first bytes of the body.
    func handleUploadResponse(_ t: TransferRecord, _ r: EngineResponse) {
        t.snapshot.httpStatus = UInt32(clamping: r.status)
        if t.isPOST, (200..<300).contains(r.status) { t.postAccepted = true }
        if r.isFailure {
            t.retryAfter = r.retryAfter
            t.failedResponseStatus = r.status
        }
        if let body = r.body { t.snapshot.response = Array(body.prefix(64 * 1024)) }
        publishChanged(t)
    }

    /// The server took the whole file and answered with success.
    func finishUpload(_ t: TransferRecord, bytesSent: Int64) {
        t.snapshot.bytesTransferred = bytesSent
        t.snapshot.bytesExpected = t.upload?.size ?? bytesSent
        sendFinalProgress(t, from: 0) // an upload's attempt sends from byte 0
        t.snapshot.completed = environment.now()
        t.life.complete()
        settle(t)
        let location = t.upload?.responseDestination
        let serial = appendEvent(PendingEvent(serial: 0, transfer: t.id, kind: .finished, location: location,
                                              httpStatus: t.snapshot.httpStatus, bytes: bytesSent), session: t.session)
        publishChanged(t)
        emitCompleted(t, serial: serial, error: nil)
        reachedFinalState(t)
    }

    /// Closes an upload's source once nothing can use it again: completed, cancelled or
    /// forgotten. A failed upload keeps a descriptor it cannot reopen (it may be resumed).
    /// An attempt still stopping may be about to use the descriptor: it closes at its end.
    func releaseUploadSource(_ t: TransferRecord, forgetting: Bool = false) {
        guard let source = t.uploadSource else { return }
        if !forgetting && t.state == .failed && t.upload?.fromDescriptor == true { return }
        if !forgetting && !t.state.isFinal { return }
        t.uploadSource = nil
        let app = sessions[t.session]?.owner
        if t.stopInFlight {
            heldDescriptors.detach(source, app: app, until: t.id)
        } else {
            closeUploadSource(source, app: app)
        }
    }

    /// An attempt ended: a source kept for it can close now.
    func attemptEndedReleasingSource(_ id: TransferID) {
        if let (source, app) = heldDescriptors.takeDetached(id) { closeUploadSource(source, app: app) }
    }

    private func closeUploadSource(_ source: EngineUpload, app: String?) {
        source.closeSource()
        countUploadSource(of: app, by: -1)
    }

    /// Counts an upload source (or a `destination-fd`: they share the budget) opened (1)
    /// or closed (-1), also against the sandboxed application `app` (nil: an unconfined
    /// caller's).
    func countUploadSource(of app: String?, by change: Int) {
        heldDescriptors.count(of: app, by: change)
    }

    /// Why no further upload source or `destination-fd` may be held (for the sandboxed
    /// application `app`, nil: an unconfined caller), nil when one may. Both are
    /// descriptors ferryd keeps for a client, so they share one budget.
    func uploadSourceRoomMissing(for app: String?) -> String? {
        heldDescriptors.roomMissing(for: app, limit: environment.uploadSourceLimit)
    }
}
