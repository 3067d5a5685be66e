// rmqfs oracle stub (our code, NOT RocketMQ's class): RocketMQ 4.9.8's DLedgerCommitLog needs the
// io.openmessaging DLedger jar, which is not in ~/.m2, so the build leaves that package out and
// compiles this stand-in, which DefaultMessageStore and MultiDispatch name (new, instanceof,
// cast). The oracle runs with enableDLegerCommitLog=false, so the constructor is never called.
package org.apache.rocketmq.store.dledger;

import io.openmessaging.storage.dledger.DLedgerServer;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DefaultMessageStore;

public class DLedgerCommitLog extends CommitLog {
    public DLedgerCommitLog(DefaultMessageStore defaultMessageStore) {
        super(defaultMessageStore);
        throw new UnsupportedOperationException("DLedger is not part of the rmqfs oracle");
    }

    public DLedgerServer getdLedgerServer() {
        throw new UnsupportedOperationException("DLedger is not part of the rmqfs oracle");
    }
}
