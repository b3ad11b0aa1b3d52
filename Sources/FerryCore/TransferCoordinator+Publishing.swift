extension TransferCoordinator {
    /// Stages the transfer for the store (unless `stage` is false: what changed may wait
    /// for its next write), then sends transferChanged when a signalled field differs
    /// from what was last sent.
    func publishChanged(_ t: TransferRecord, stage: Bool = true) {
        reindex(t)
        if stage { stageTransfer(t) }
        let current = t.signalledDigest
        if current == t.publishedDigest { return }
        t.publishedDigest = current
        emit(.transferChanged(t.snapshot))
    }

    /// sessionChanged for sessions whose ActiveTransfers changed (only those the index
    /// saw change); managerChanged when its counts or settings changed (rates have no
    /// change signal).
    func publishAggregates() {
        guard !lifecycle.isShutDown else { return }
        for id in index.takeChangedSessions().sorted() {
            guard let s = sessions[id] else { continue }
            let active = activeCount(s.id)
            if active != s.publishedActive {
                s.publishedActive = active
                emit(.sessionChanged(snapshot(of: s)))
            }
        }
        let current = manager
        if publishedManager.announces(current) { emit(.managerChanged(current)) }
    }
}
