// rmqfs oracle stub (our code): only the getter DefaultMessageStore names; never reached.
package io.openmessaging.storage.dledger;

public class DLedgerServer {
    public DLedgerConfig getdLedgerConfig() {
        throw new UnsupportedOperationException("DLedger is not part of the rmqfs oracle");
    }
}
