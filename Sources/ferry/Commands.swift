import ArgumentParser
import DBus
import FerryClient
import Foundation

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List transfers, oldest first.")

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Print JSON.")
    var json = false

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            var infos: [TransferInfo] = []
            for t in try await client.listTransfers() { infos.append(try await t.info()) }
            if json {
                JSONOutput.print(infos.map(JSONOutput.transfer))
                return
            }
            guard !infos.isEmpty else {
                print("No transfers.")
                return
            }
            print(Format.tableHeader)
            for i in infos { print(Format.tableRow(i)) }
        }
    }
}

struct Show: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show one transfer in full.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "A transfer id.")
    var id: String

    @Flag(help: "Print JSON.")
    var json = false

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let ids = try parseTransferIDs([id])
            let info = try await resolveTransfers(client, ids)[0].info()
            if json {
                JSONOutput.print(JSONOutput.transfer(info))
            } else {
                print(Format.details(info))
            }
        }
    }
}

/// `pause`, `resume`, `cancel`, `rm`: ids or --all.
struct TargetOptions: ParsableArguments {
    @Argument(help: "Transfer ids.")
    var ids: [String] = []

    @Flag(help: "Every transfer of the session (rm: every finished transfer).")
    var all = false

    func validate() throws {
        if ids.isEmpty && !all { throw ValidationError("name transfer ids, or --all") }
        if !ids.isEmpty && all { throw ValidationError("name transfer ids or --all, not both") }
    }
}

/// Applies an action to named transfers (or all of the session's), reporting
/// each refusal and failing if any was refused.
func apply(_ global: GlobalOptions, _ target: TargetOptions,
           all allAction: ((FerrySession) async throws -> Void)?,
           filter: (TransferInfo) -> Bool = { _ in true },
           each: @escaping (FerryTransfer) async throws -> Void) async throws {
    try await runReportingErrors {
        let client = try global.connect()
        if target.all, let allAction {
            try await allAction(try await client.openSession(global.session))
            return
        }
        let transfers: [FerryTransfer]
        if target.all {
            let session = try await client.openSession(global.session)
            var picked: [FerryTransfer] = []
            for t in try await session.listTransfers() where filter(try await t.info()) { picked.append(t) }
            transfers = picked
        } else {
            transfers = try await resolveTransfers(client, try parseTransferIDs(target.ids))
        }
        var refused = false
        for t in transfers {
            do {
                try await each(t)
            } catch let e as BusError {
                printError("transfer \(t.id): \(describe(e).message)")
                refused = true
            }
        }
        if refused { throw CLIError.refused("some transfers were not changed") }
    }
}

struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Pause transfers, keeping what was downloaded.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    func run() async throws {
        try await apply(global, target, all: { try await $0.pauseAll() }) { try await $0.pause() }
    }
}

struct Resume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Resume paused or failed transfers.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    func run() async throws {
        try await apply(global, target, all: { try await $0.resumeAll() }) { try await $0.resume() }
    }
}

struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Cancel transfers and delete their partial files.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    func run() async throws {
        try await apply(global, target, all: { try await $0.cancelAll() }) { try await $0.cancel() }
    }
}

struct Remove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rm", abstract: "Forget finished transfers (downloaded files stay).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: TargetOptions
    func run() async throws {
        try await apply(global, target, all: nil, filter: \.isFinal) { try await $0.remove() }
    }
}

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show live progress until the transfers end (all unfinished ones when no id is given).")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "Transfer ids.")
    var ids: [String] = []

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            var transfers: [FerryTransfer]
            if ids.isEmpty {
                transfers = []
                for t in try await client.listTransfers() where !(try await t.info().isFinal) { transfers.append(t) }
                if transfers.isEmpty {
                    print("Nothing is queued or running.")
                    return
                }
            } else {
                transfers = try await resolveTransfers(client, try parseTransferIDs(ids))
            }
            let infos = try await ProgressDisplay.follow(transfers, client: client, quiet: false)
            if infos.contains(where: { $0.state != "completed" }) { throw CLIError.transfersFailed }
        }
    }
}

struct Wait: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait until transfers end; exit 0 only if all completed.")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "Transfer ids.")
    var ids: [String]

    func run() async throws {
        try await runReportingErrors {
            let client = try global.connect()
            let transfers = try await resolveTransfers(client, try parseTransferIDs(ids))
            let infos = try await TransferMonitor.waitForAll(transfers, client: client)
            for i in infos where i.state != "completed" {
                printError("transfer \(i.id) \(i.state)\(i.errorMessage.isEmpty ? "" : ": \(i.errorMessage)")")
            }
            if infos.contains(where: { $0.state != "completed" }) { throw CLIError.transfersFailed }
        }
    }
}
