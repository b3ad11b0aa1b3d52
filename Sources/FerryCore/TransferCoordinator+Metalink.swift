import FerryMetalink
import Foundation

/// What a transfer took from its `metalink` document: where the file comes from, in
/// order, and what it must be. The value the `mirrors` and `pieces` machinery takes
/// (`urls` as the transfer's sources, `document.pieces` as its piece hashes).
public struct ResolvedMetalink: Sendable, Equatable {
    /// The document as read (`MetalinkParser`).
    public var document: Metalink
    /// The URLs to fetch from, best first: the document's (at most 16, by priority),
    /// then the `Download` call's own URL when it is neither the document's URL nor
    /// among them.
    public var urls: [String]
    /// The one the file is fetched from now (an index in `urls`).
    public var current = 0

    public init(document: Metalink, downloadURL: String, metalinkURL: String) {
        self.document = document
        var urls = document.urls
        if downloadURL != metalinkURL && !urls.contains(downloadURL) { urls.append(downloadURL) }
        self.urls = urls
    }

    public var currentURL: String { urls[min(current, urls.count - 1)] }

    /// The URLs after the current one, then `extra` (the `mirrors` option), without
    /// repeats, at most `Limits.mirrors`: an attempt's mirrors.
    public func mirrors(adding extra: [String]) -> [String] {
        var seen: Set<String> = [currentURL]
        var list: [String] = []
        for url in urls.dropFirst(current + 1) + extra where list.count < Limits.mirrors && seen.insert(url).inserted {
            list.append(url)
        }
        return list
    }

    /// The document's sha-256 pieces as the `pieces` option takes them; nil without, or
    /// when they are outside its limits (piece length 16 KiB to 1 GiB, at most 32,768
    /// pieces): the file is then checked whole.
    public var pieceList: PieceList? {
        guard let pieces = document.pieces, pieces.length > 0 else { return nil }
        return try? PieceList(length: UInt64(pieces.length), hex: pieces.sha256)
    }
}

/// The `metalink` option (v1.2): the first attempt of such a download fetches the
/// document through the engine (same proxy, headers, cookies, timeouts and retries as
/// the file, at most `MetalinkLimits.maxDocumentBytes`) into a hidden file beside the
/// `.part`; it is read, removed, and the transfer goes back to the head of the queue to
/// fetch the file from the document's URLs, checked against its size and SHA-256. A
/// document that cannot be used fails the transfer with `InvalidMetalink`.
///
/// Each attempt fetches from the current URL with the document's other URLs as its
/// mirrors and the document's pieces as its pieces (`request(for:)`): the engine spreads
/// ranges over them, checks every piece and fetches a bad one again elsewhere. Beyond
/// that, a current URL that answers a final HTTP error, or a file that fails the size or
/// whole-file check, moves the transfer on to the next URL, from byte 0.
extension TransferCoordinator {
    /// The hidden file the document is fetched into: beside the `.part` (so a sandboxed
    /// application's stays in its folder), short whatever the file's name.
    func metalinkDocumentPath(_ t: TransferRecord) -> String {
        FileSystemChecks.join(FileSystemChecks.directoryName(t.partPath), ".ferry-\(t.id).meta4.part")
    }

    /// The engine request of an attempt that fetches the document.
    func metalinkDocumentRequest(_ t: TransferRecord, url: String) -> EngineRequest {
        let config = sessions[t.session]?.configuration ?? SessionConfiguration()
        var request = EngineRequest(id: t.id, url: url,
                                    headers: HeaderFields.merge(session: config.headers, transfer: t.options.headers, excluding: []),
                                    partPath: metalinkDocumentPath(t), offset: 0, ifRange: nil,
                                    speedLimit: t.appliedSpeedLimit, requestTimeout: config.requestTimeout,
                                    proxy: config.proxy, computeSHA256: false)
        request.connections = 1
        request.bodyLimit = EngineBodyLimit(
            bytes: Int64(MetalinkLimits.maxDocumentBytes),
            error: .invalidMetalink("the Metalink document at \(RequestURL.redacted(url)) is larger than \(MetalinkLimits.maxDocumentBytes) bytes (4 MiB), the most Ferry reads"))
        request.cookieJar = cookieJar(for: t.session)
        request.confinedTo = confinement(of: t)
        return request
    }

    /// The document's attempt ended (the life already took the end). A fetched document
    /// is read here and its file removed; it is parsed off this queue
    /// (`environment.metalinkReader`), and `metalinkDocumentRead` takes it from there.
    /// Meanwhile the transfer runs, its attempt ended: paused, cancelled, failed or
    /// removed meanwhile, it never takes the document.
    func metalinkDocumentEnded(_ t: TransferRecord, _ outcome: EngineOutcome) {
        let path = metalinkDocumentPath(t)
        let area = confinement(of: t)
        defer { removePartFiles([path], within: area) }
        switch outcome {
        case .succeeded:
            guard let data = FileDigest.contents(path: path, within: area, max: MetalinkLimits.maxDocumentBytes) else {
                attemptFailed(t, .disk("could not read the Metalink document ferryd fetched (\(path))"))
                return
            }
            guard let attempt = t.life.attempt else { return }
            let (id, number) = (t.id, attempt.number)
            let queue = self.queue, coordinator = WeakCoordinator(self)
            environment.metalinkReader.read(data) { result in
                queue.async { coordinator.coordinator?.metalinkDocumentRead(id, attempt: number, result) }
            }
        case .failed(let error, _):
            attemptFailed(t, error) // InvalidMetalink (too large) is final; a network error retries
        case .stopped:
            // Not asked for (the engine shut down): it waits for its turn again.
            t.life.requeue()
            settle(t)
            publishChanged(t)
        }
    }

    /// A document is parsed (`metalinkDocumentEnded`), as one change: the transfer still
    /// running the attempt that fetched it takes it (or fails with `InvalidMetalink`);
    /// any other has moved on and the document is dropped.
    func metalinkDocumentRead(_ id: TransferID, attempt number: UInt32, _ result: Result<Metalink, MetalinkError>) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !lifecycle.isShutDown else { return }
        mutate {
            guard let t = transfers[id], t.isAwaitingMetalink, !t.life.stopping,
                  let attempt = t.life.attempt, attempt.ended, attempt.number == number else { return }
            let document: Metalink
            switch result {
            case .success(let read): document = read
            case .failure(let error):
                failTransfer(t, .invalidMetalink(error.message))
                return
            }
            if let wanted = t.options.sha256?.lowercased(), let said = document.sha256, said != wanted {
                failTransfer(t, .invalidMetalink("the Metalink document's sha-256 \(said) is not the sha256 option's \(wanted)"))
                return
            }
            adopt(t, ResolvedMetalink(document: document, downloadURL: t.snapshot.url, metalinkURL: t.options.metalink ?? ""))
        }
    }

    /// Takes the document's word and sends the transfer back to the head of the queue
    /// to fetch the file itself.
    private func adopt(_ t: TransferRecord, _ resolved: ResolvedMetalink) {
        t.metalink = resolved
        let doc = resolved.document
        logger.info("transfer \(t.id): Metalink document read: \(resolved.urls.count) URLs, size \(doc.size.map(String.init) ?? "not given"), sha-256 \(doc.sha256 == nil ? "not given" : "given"), \(doc.pieces?.sha256.count ?? 0) pieces")
        if let size = doc.size { t.snapshot.bytesExpected = size }
        // The `Mirrors` and `Pieces` properties say what the file is now fetched from and checked by.
        if t.options.mirrors.isEmpty { t.snapshot.mirrors = resolved.mirrors(adding: []).map { Redaction.urlWithoutCredentials($0) } }
        if t.options.pieces == nil, let pieces = resolved.pieceList {
            t.snapshot.pieceLength = UInt64(pieces.length)
            t.snapshot.pieceCount = UInt32(pieces.count)
        } else if t.options.pieces == nil, doc.pieces != nil {
            logger.info("transfer \(t.id): the Metalink document's pieces are outside the pieces limits (16 KiB to 1 GiB, at most \(PieceList.maximumCount)); the file is checked whole")
        }
        if t.serverMayName {
            // A directory was given: the file takes the document's name (its last part,
            // made safe), and no Content-Disposition of a mirror changes it.
            t.serverMayName = false
            adoptServerName(t, FileNameSanitizer.sanitize(doc.fileName) ?? FileNameSanitizer.fallbackName)
        }
        t.life.requeue()
        settle(t)
        publishChanged(t)
    }

    /// Moves a Metalink download to its next URL, from byte 0, after `reason`; false
    /// when it has no other URL (or is not a Metalink download).
    func tryNextMetalinkSource(_ t: TransferRecord, because reason: String) -> Bool {
        guard var resolved = t.metalink, resolved.current + 1 < resolved.urls.count else { return false }
        let from = RequestURL.redacted(resolved.currentURL)
        resolved.current += 1
        t.metalink = resolved
        logger.info("transfer \(t.id): \(reason) from \(from); trying the Metalink document's next URL, \(RequestURL.redacted(resolved.currentURL))")
        deletePartFiles(t)
        t.etag = nil
        t.lastModified = nil
        t.snapshot.resumable = false
        t.snapshot.bytesTransferred = 0
        t.durablePart = nil
        t.life.requeue()
        settle(t)
        publishChanged(t)
        return true
    }
}

extension FileDigest {
    /// A file's bytes, nil when it cannot be read or holds more than `max` (a sandboxed
    /// application's opened relative to its folder as opened and checked).
    static func contents(path: String, within area: SandboxArea? = nil, max: Int) -> Data? {
        var data = Data()
        let whole = readChunks(path: path, within: area, chunk: 64 * 1024) { chunk in
            data.append(contentsOf: chunk)
            return data.count <= max
        }
        return whole ? data : nil
    }
}

extension CoreError {
    var isChecksumMismatch: Bool {
        if case .checksumMismatch = self { return true }
        return false
    }

    /// A proxy wants credentials, or refused those given (HTTP 407): every source is
    /// reached through the same proxy, so another Metalink source would be refused too
    /// (and moving to one starts the file over).
    var isProxyAuthenticationRefusal: Bool {
        if case .http(407, _) = self { return true }
        return false
    }
}
