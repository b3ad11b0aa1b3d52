import FerryCore
@testable import FerryService
import XCTest

/// The wording of the batch notification (no bus needed).
final class BatchSummaryTests: XCTestCase {
    let home = "/home/ada"

    func finished(_ id: TransferID, _ path: String, _ bytes: Int64) -> TransferSnapshot {
        TransferSnapshot(id: id, session: 1, url: "https://example.org/\(id)", destination: path, state: .completed,
                         bytesTransferred: bytes, bytesExpected: bytes)
    }

    func failed(_ id: TransferID, _ path: String, url: String = "https://example.org/x", name: String, message: String) -> TransferSnapshot {
        TransferSnapshot(id: id, session: 1, url: url, destination: path, state: .failed, errorName: name, errorMessage: message)
    }

    func testOneFile() {
        var s = BatchSummary()
        s.add(finished(1, "/home/ada/Downloads/debian.iso", 658_505_728))
        let n = s.notification(batch: 1, home: home)
        XCTAssertEqual(n.summary, "Download complete")
        XCTAssertEqual(n.body, "debian.iso (628.0 MiB) in ~/Downloads")
        XCTAssertEqual(n.category, "transfer.complete")
        XCTAssertEqual(n.urgency, .normal)
        XCTAssertEqual(n.actions.map(\.key), ["default", "show"])
        XCTAssertEqual(n.actions.last?.label, "Show File")
    }

    func testSeveralFilesInSeveralFolders() {
        var s = BatchSummary()
        s.add(finished(1, "/home/ada/Downloads/a.tar", 1_500))
        s.add(finished(2, "/srv/isos/b.iso", 2_000_000_000))
        let n = s.notification(batch: 1, home: home)
        XCTAssertEqual(n.summary, "2 downloads complete")
        XCTAssertEqual(n.body, "2 files (1.9 GiB) in 2 folders")
        XCTAssertEqual(n.actions.last?.label, "Show Files")
    }

    func testFailuresAreNamedWithTheirReason() {
        var s = BatchSummary()
        s.add(finished(1, "/home/ada/Downloads/a.txt", 10))
        s.add(finished(2, "/home/ada/Downloads/b.txt", 20))
        s.add(failed(3, "/home/ada/Downloads/report.pdf", name: "org.ferry.Ferry1.Error.Http", message: "HTTP 404 Not Found"))
        s.add(TransferSnapshot(id: 4, session: 1, url: "https://example.org/c", state: .cancelled))
        let n = s.notification(batch: 7, home: home)
        XCTAssertEqual(n.batch, 7)
        XCTAssertEqual(n.summary, "2 downloaded, 1 failed")
        XCTAssertEqual(n.body, "report.pdf — 404 Not Found\n2 files (30 bytes) in ~/Downloads")
        XCTAssertEqual(n.category, "transfer.error")
        XCTAssertEqual(n.actions.map(\.key), ["default", "show", "retry"])
        XCTAssertEqual(n.actions.first { $0.key == "show" }?.label, "Open Folder")
    }

    func testOnlyFailuresNameTheURLWhenNoFileWasChosenAndListAtMostThree() {
        var s = BatchSummary()
        for i in 1...5 {
            s.add(failed(TransferID(i), "", url: "https://mirror\(i).example.org/pub/file\(i).zip",
                         name: "org.ferry.Ferry1.Error.Network", message: "could not connect to mirror\(i).example.org"))
        }
        let n = s.notification(batch: 1, home: home)
        XCTAssertEqual(n.summary, "5 downloads failed")
        XCTAssertEqual(n.body.split(separator: "\n").map(String.init), [
            "file1.zip — could not connect to mirror1.example.org",
            "file2.zip — could not connect to mirror2.example.org",
            "file3.zip — could not connect to mirror3.example.org",
            "and 2 more failed",
        ])
        XCTAssertEqual(n.actions.map(\.key), ["retry"])
    }

    /// Uploads are named as uploads, their files are not shown in a folder (they were
    /// sent, not received); a batch of both says transfers.
    func testUploadsAreUploads() {
        func upload(_ id: TransferID, _ path: String, _ state: TransferState, bytes: Int64 = 4_000) -> TransferSnapshot {
            var t = TransferSnapshot(id: id, session: 1, kind: .upload, url: "https://example.org/up", destination: path, state: state,
                                     bytesTransferred: bytes, bytesExpected: bytes)
            if state == .failed {
                t.errorName = "org.ferry.Ferry1.Error.Http"
                t.errorMessage = "HTTP 503 Service Unavailable"
            }
            return t
        }
        var s = BatchSummary()
        s.add(upload(1, "/home/ada/Pictures/a.jpg", .completed))
        s.add(upload(2, "/home/ada/Pictures/b.jpg", .completed))
        var n = s.notification(batch: 1, home: home)
        XCTAssertEqual(n.summary, "2 uploads complete")
        XCTAssertEqual(n.body, "2 files (7.8 KiB) sent")
        XCTAssertEqual(n.actions, [], "nothing to show: the files were sent")

        var one = BatchSummary()
        one.add(upload(3, "/home/ada/Pictures/c.jpg", .failed))
        n = one.notification(batch: 2, home: home)
        XCTAssertEqual(n.summary, "Upload failed")
        XCTAssertEqual(n.body, "c.jpg — 503 Service Unavailable")
        XCTAssertEqual(n.actions.map(\.key), ["retry"])

        s.add(finished(4, "/home/ada/Downloads/d.txt", 10))
        n = s.notification(batch: 3, home: home)
        XCTAssertEqual(n.summary, "3 transfers complete")
        XCTAssertEqual(n.body, "2 files (7.8 KiB) sent\nd.txt (10 bytes) in ~/Downloads")
        XCTAssertEqual(n.actions.last?.label, "Show File")
    }

    /// A transfer that failed, was resumed and then completed within the batch is one
    /// download, shown once by its last outcome (and no Retry for it).
    func testAFailureResumedWithinTheBatchIsReplacedByItsLastOutcome() {
        var s = BatchSummary()
        s.add(failed(1, "/home/ada/Downloads/report.pdf", name: "org.ferry.Ferry1.Error.Http", message: "HTTP 403 Forbidden"))
        s.add(finished(1, "/home/ada/Downloads/report.pdf", 9))
        let n = s.notification(batch: 1, home: home)
        XCTAssertEqual(n.summary, "Download complete")
        XCTAssertEqual(n.body, "report.pdf (9 bytes) in ~/Downloads")
        XCTAssertEqual(n.actions.map(\.key), ["default", "show"])
    }

    func testCancelledOnlyIsEmpty() {
        var s = BatchSummary()
        s.add(TransferSnapshot(id: 1, session: 1, url: "https://example.org/c", state: .cancelled))
        XCTAssertTrue(s.isEmpty)
    }

    func testSizesAndPaths() {
        XCTAssertEqual(ByteCount.describe(0), "0 bytes")
        XCTAssertEqual(ByteCount.describe(1), "1 byte")
        XCTAssertEqual(ByteCount.describe(999), "999 bytes")
        // IEC units, as the CLI counts.
        XCTAssertEqual(ByteCount.describe(1_000), "1000 bytes")
        XCTAssertEqual(ByteCount.describe(1_024), "1.0 KiB")
        XCTAssertEqual(ByteCount.describe(1_048_473), "1023.9 KiB")
        XCTAssertEqual(ByteCount.describe(1_048_525), "1.0 MiB")
        XCTAssertEqual(ByteCount.describe(67_108_864), "64.0 MiB")
        XCTAssertEqual(BatchSummary.abbreviate("/home/ada", home: home), "~")
        XCTAssertEqual(BatchSummary.abbreviate("/home/ada/Downloads", home: home), "~/Downloads")
        XCTAssertEqual(BatchSummary.abbreviate("/home/adam/Downloads", home: home), "/home/adam/Downloads")
    }
}
