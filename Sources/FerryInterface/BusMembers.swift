/// One argument of a bus method or signal as the contract declares it: its name (as
/// introspection shows it) and its D-Bus type signature.
public struct BusArgument: Sendable, Hashable {
    public let name: String
    public let signature: String

    init(_ name: String, _ signature: String) {
        self.name = name
        self.signature = signature
    }
}

/// A method of the bus API as the contract declares it: its interface, name, input
/// arguments and output arguments. The daemon exports and dispatches its methods from
/// these, its handlers read arguments by them, and the clients call by them: no method
/// name is spelled anywhere else.
public struct BusMethod: Sendable, Hashable {
    public let interface: String
    public let name: String
    public let inputs: [BusArgument]
    public let outputs: [BusArgument]

    init(_ interface: String, _ name: String, in inputs: [BusArgument] = [], out outputs: [BusArgument] = []) {
        self.interface = interface
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
    }

    /// The input signature, as a call must carry it.
    public var inputSignature: String { inputs.map(\.signature).joined() }
    public var outputSignature: String { outputs.map(\.signature).joined() }

    /// Where `argument` stands among the inputs. A programming error (not a caller's)
    /// when it is not one of this method's.
    public func position(of argument: BusArgument) -> Int {
        guard let i = inputs.firstIndex(of: argument) else {
            preconditionFailure("\(argument.name) is not an argument of \(interface).\(name)")
        }
        return i
    }
}

/// A signal of the bus API as the contract declares it: interface, name and arguments.
public struct BusSignal: Sendable, Hashable {
    public let interface: String
    public let name: String
    public let arguments: [BusArgument]

    init(_ interface: String, _ name: String, _ arguments: [BusArgument]) {
        self.interface = interface
        self.name = name
        self.arguments = arguments
    }

    public var signature: String { arguments.map(\.signature).joined() }
}

extension FerryInterface {
    /// Arguments that several methods or signals share.
    public enum Argument {
        public static let url = BusArgument("url", "s")
        public static let options = BusArgument("options", "a{sv}")
        public static let transfer = BusArgument("transfer", "o")
        public static let transfers = BusArgument("transfers", "ao")
        public static let events = BusArgument("events", "a(tosa{sv})")
        public static let succeeded = BusArgument("succeeded", "u")
        public static let failed = BusArgument("failed", "u")
        public static let cancelled = BusArgument("cancelled", "u")
        public static let serial = BusArgument("serial", "t")
        /// A batch's or group's end: how many succeeded, failed, were cancelled.
        static let counts = [succeeded, failed, cancelled]
    }

    /// `org.ferry.Ferry1.Manager`'s methods.
    public enum ManagerMethod {
        public static let identifier = BusArgument("identifier", "s")
        public static let configuration = BusArgument("configuration", "a{sv}")
        public static let properties = BusArgument("properties", "as")

        public static let openSession = BusMethod(managerInterface, "OpenSession", in: [identifier, configuration],
                                                  out: [BusArgument("session", "o")])
        public static let listSessions = BusMethod(managerInterface, "ListSessions", out: [BusArgument("sessions", "ao")])
        public static let listTransfers = BusMethod(managerInterface, "ListTransfers", out: [Argument.transfers])
        /// (Addition.) Named properties of every visible transfer, as columns.
        public static let listTransferProperties = BusMethod(managerInterface, "ListTransferProperties", in: [properties],
                                                             out: [Argument.transfers, BusArgument("values", "a{sv}")])
        /// (v1.2) Private signals of every session reach the caller too.
        public static let watch = BusMethod(managerInterface, "Watch")
        public static let unwatch = BusMethod(managerInterface, "Unwatch")
        public static let pauseAll = BusMethod(managerInterface, "PauseAll")
        public static let resumeAll = BusMethod(managerInterface, "ResumeAll")
        public static let cancelAll = BusMethod(managerInterface, "CancelAll")

        public static let all = [openSession, listSessions, listTransfers, listTransferProperties, watch, unwatch,
                                 pauseAll, resumeAll, cancelAll]
    }

    /// `org.ferry.Ferry1.Manager`'s signals.
    public enum ManagerSignal {
        public static let allFinished = BusSignal(managerInterface, "AllFinished", Argument.counts)
        public static let all = [allFinished]
    }

    /// `org.ferry.Ferry1.Session`'s methods.
    public enum SessionMethod {
        public static let file = BusArgument("file", "s")
        public static let items = BusArgument("items", "a(sa{sv})")
        public static let resumeData = BusArgument("resume_data", "ay")
        public static let after = BusArgument("after", "t")
        public static let limit = BusArgument("limit", "u")
        public static let cancelTransfers = BusArgument("cancel_transfers", "b")

        public static let download = BusMethod(sessionInterface, "Download", in: [Argument.url, Argument.options],
                                               out: [Argument.transfer])
        public static let upload = BusMethod(sessionInterface, "Upload", in: [Argument.url, file, Argument.options],
                                             out: [Argument.transfer])
        /// (v1.2) Many downloads as one group, all or none.
        public static let downloadGroup = BusMethod(sessionInterface, "DownloadGroup", in: [items, Argument.options],
                                                    out: [BusArgument("group", "o")])
        public static let resumeDownload = BusMethod(sessionInterface, "ResumeDownload", in: [resumeData, Argument.options],
                                                     out: [Argument.transfer])
        public static let listTransfers = BusMethod(sessionInterface, "ListTransfers", out: [Argument.transfers])
        public static let pauseAll = BusMethod(sessionInterface, "PauseAll")
        public static let resumeAll = BusMethod(sessionInterface, "ResumeAll")
        public static let cancelAll = BusMethod(sessionInterface, "CancelAll")
        public static let pendingEvents = BusMethod(sessionInterface, "PendingEvents", out: [Argument.events])
        /// (Addition.) One page of `PendingEvents`.
        public static let pendingEventsAfter = BusMethod(sessionInterface, "PendingEventsAfter", in: [after, limit],
                                                         out: [Argument.events])
        public static let acknowledgeEvents = BusMethod(sessionInterface, "AcknowledgeEvents", in: [Argument.serial])
        public static let close = BusMethod(sessionInterface, "Close", in: [cancelTransfers])

        public static let all = [download, upload, downloadGroup, resumeDownload, listTransfers, pauseAll, resumeAll,
                                 cancelAll, pendingEvents, pendingEventsAfter, acknowledgeEvents, close]
    }

    /// `org.ferry.Ferry1.Session`'s signals.
    public enum SessionSignal {
        public static let allFinished = BusSignal(sessionInterface, "AllFinished", Argument.counts)
        public static let all = [allFinished]
    }

    /// `org.ferry.Ferry1.Transfer`'s methods.
    public enum TransferMethod {
        public static let pause = BusMethod(transferInterface, "Pause", out: [BusArgument("resume_data", "ay")])
        public static let resume = BusMethod(transferInterface, "Resume")
        public static let cancel = BusMethod(transferInterface, "Cancel")
        public static let remove = BusMethod(transferInterface, "Remove")
        public static let setURL = BusMethod(transferInterface, "SetUrl", in: [Argument.url])

        public static let all = [pause, resume, cancel, remove, setURL]
    }

    /// `org.ferry.Ferry1.Transfer`'s signals.
    public enum TransferSignal {
        public static let progress = BusSignal(transferInterface, "Progress", [
            BusArgument("bytes_written", "x"), BusArgument("total_bytes_written", "x"), BusArgument("total_bytes_expected", "x"),
        ])
        public static let resumedAtOffset = BusSignal(transferInterface, "ResumedAtOffset", [
            BusArgument("offset", "x"), BusArgument("expected_total", "x"),
        ])
        public static let finished = BusSignal(transferInterface, "Finished", [BusArgument("location", "s")])
        public static let completed = BusSignal(transferInterface, "Completed", [
            Argument.serial, BusArgument("error_name", "s"), BusArgument("error_message", "s"),
        ])

        public static let all = [progress, resumedAtOffset, finished, completed]
    }

    /// (v1.2) `org.ferry.Ferry1.Group`'s methods.
    public enum GroupMethod {
        public static let pause = BusMethod(groupInterface, "Pause")
        public static let resume = BusMethod(groupInterface, "Resume")
        public static let cancel = BusMethod(groupInterface, "Cancel")
        public static let remove = BusMethod(groupInterface, "Remove")

        public static let all = [pause, resume, cancel, remove]
    }

    /// (v1.2) `org.ferry.Ferry1.Group`'s signals.
    public enum GroupSignal {
        public static let finished = BusSignal(groupInterface, "Finished", Argument.counts)
        public static let all = [finished]
    }

    /// Every method of an interface, by interface name.
    public static let methods: [String: [BusMethod]] = [
        managerInterface: ManagerMethod.all, sessionInterface: SessionMethod.all,
        transferInterface: TransferMethod.all, groupInterface: GroupMethod.all,
    ]

    /// Every signal of an interface, by interface name.
    public static let signals: [String: [BusSignal]] = [
        managerInterface: ManagerSignal.all, sessionInterface: SessionSignal.all,
        transferInterface: TransferSignal.all, groupInterface: GroupSignal.all,
    ]
}
