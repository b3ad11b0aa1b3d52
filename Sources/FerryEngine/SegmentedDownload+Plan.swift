import CCurl
import Crypto
import FerryCore
import Foundation

/// Where a segmented attempt starts: its part file opened on a file job, and what of it
/// the request lets it keep.
extension SegmentedDownload {
    /// Where an attempt starts in its part file, decided from the request and the
    /// file's size when opened.
    struct Plan {
        /// Continue these ranges (their validator is the request's `ifRange`).
        var map: SegmentMap?
        /// Else the first request starts here; 0 cuts the file to nothing first.
        var from: Int64 = 0
        /// The request's validator still holds for what is on disk.
        var keepsValidator = true

        init(request: EngineRequest, sizeOnDisk: Int64) {
            let validator = request.ifRange
            // Continue from a map only with its validator and a part file that holds its ranges.
            if let map = request.segments, validator != nil, sizeOnDisk >= (map.done.last?.upperBound ?? 0),
               request.pieces?.fits(total: map.total) ?? true {
                self.map = map
                return
            }
            if request.pieces != nil {
                // Only checked pieces are kept (as a map): a prefix without one starts over.
                keepsValidator = request.segments == nil && request.offset == 0
                return
            }
            if request.offset > 0, validator != nil, sizeOnDisk >= request.offset {
                from = request.offset
            } else if request.segments != nil || request.offset > 0 {
                // No validator, or a part file shorter than claimed: nothing on disk can be trusted.
                keepsValidator = false
            }
        }

        /// The file was cut to nothing (or is new) for this attempt.
        var isFresh: Bool { map == nil && from == 0 }
        /// What the file holds for the transfer if the attempt stops before any request.
        var bytesKept: Int64 { map?.contiguousPrefix ?? from }
    }

    /// What the file job that opens a segmented attempt's part file found.
    enum OpenedPart {
        case opened(PartFile, Plan)
        case failed(PartFileError)
        /// Not a regular file (a FIFO, a device): opened for one connection instead.
        case oneConnection(Result<FerryEngine.OpenedPart, FerryEngine.OpenedPart.Failure>)
    }

    /// Opens the part file and, for a fresh start, cuts it to nothing. Runs on a file
    /// job: on a slow or stalled file system (ext4 looking for a free inode, a hung
    /// network or FUSE mount) only this attempt waits.
    static func openPart(for request: EngineRequest) -> OpenedPart {
        if PartFile.existsAsOtherThanRegularFile(request.partPath) {
            return .oneConnection(FerryEngine.OpenedPart.open(for: request))
        }
        let file: PartFile
        switch PartFile.open(request.partPath, within: request.confinedTo) {
        case .success(let opened): file = opened
        case .failure(let error): return .failed(error)
        }
        let plan = Plan(request: request, sizeOnDisk: file.initialSize)
        if plan.isFresh, let error = file.truncate(to: 0) {
            file.close()
            return .failed(error)
        }
        return .opened(file, plan)
    }
}
