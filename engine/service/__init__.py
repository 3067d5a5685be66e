"""The store's services, as RocketMQ's ``DefaultMessageStore`` runs them: the put paths, dispatch
to ConsumeQueues and the index, recovery at open, flush and group commit, getMessage, cleanup,
the store lock, the store tree's safety check, what a produced message may hold (validation)
and the progress protocol of long work (workprogress).

Uses ``engine.format`` and ``engine.storeconfig``; ``engine.store`` (the façade that owns these
services) only for type annotations.
"""
