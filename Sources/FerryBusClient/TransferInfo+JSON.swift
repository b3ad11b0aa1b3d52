import Foundation

/// A transfer's snapshot as JSON: the `ferry` CLI's `--json` form of a transfer
/// (`ls`, `show`, `get`, `wait`; desktop/man/ferry.1 documents it field by field), with
/// snake_case keys spelled out. `mirrors`, `piece_length`/`piece_count` and `response`
/// (an upload's answer as text) are absent when the transfer has none. `session` is
/// written as the field holds it (the CLI puts the session's identifier there).
extension TransferInfo: Encodable {
    enum CodingKeys: String, CodingKey {
        case id, path, session, kind, url, description, destination, state
        case waitingReason = "waiting_reason"
        case bytesTransferred = "bytes_transferred"
        case bytesExpected = "bytes_expected"
        case rate
        case expectedEnd = "expected_end"
        case errorName = "error_name"
        case errorMessage = "error_message"
        case httpStatus = "http_status"
        case attempts, resumable, sha256, created, started, completed, priority
        case speedLimit = "speed_limit"
        case nextAttempt = "next_attempt"
        case singleConnectionReason = "single_connection_reason"
        case connectionLimitReason = "connection_limit_reason"
        case mirrors
        case pieceLength = "piece_length"
        case pieceCount = "piece_count"
        case response
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(path, forKey: .path)
        try c.encode(session, forKey: .session)
        try c.encode(kind, forKey: .kind)
        try c.encode(url, forKey: .url)
        try c.encode(description, forKey: .description)
        try c.encode(destination, forKey: .destination)
        try c.encode(state, forKey: .state)
        try c.encode(waitingReason, forKey: .waitingReason)
        try c.encode(bytesTransferred, forKey: .bytesTransferred)
        try c.encode(bytesExpected, forKey: .bytesExpected)
        try c.encode(rate, forKey: .rate)
        try c.encode(expectedEnd, forKey: .expectedEnd)
        try c.encode(errorName, forKey: .errorName)
        try c.encode(errorMessage, forKey: .errorMessage)
        try c.encode(httpStatus, forKey: .httpStatus)
        try c.encode(attempts, forKey: .attempts)
        try c.encode(resumable, forKey: .resumable)
        try c.encode(sha256, forKey: .sha256)
        try c.encode(created, forKey: .created)
        try c.encode(started, forKey: .started)
        try c.encode(completed, forKey: .completed)
        try c.encode(priority, forKey: .priority)
        try c.encode(speedLimit, forKey: .speedLimit)
        try c.encode(nextAttempt, forKey: .nextAttempt)
        try c.encode(singleConnectionReason, forKey: .singleConnectionReason)
        try c.encode(connectionLimitReason, forKey: .connectionLimitReason)
        if !mirrors.isEmpty { try c.encode(mirrors, forKey: .mirrors) }
        if pieceCount > 0 {
            try c.encode(pieceLength, forKey: .pieceLength)
            try c.encode(pieceCount, forKey: .pieceCount)
        }
        if !response.isEmpty { try c.encode(String(decoding: response, as: UTF8.self), forKey: .response) }
    }
}
