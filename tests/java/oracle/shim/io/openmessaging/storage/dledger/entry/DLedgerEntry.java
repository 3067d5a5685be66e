// rmqfs oracle stub (our code): the DLedger jar is not in ~/.m2, and DefaultMessageStore only
// reads this constant (inlined at compile time) when the CommitLog is a DLedgerCommitLog.
// 48 = magic 4 + size 4 + index 8 + term 8 + pos 8 + channel 4 + chainCrc 4 + bodyCrc 4 + bodySize 4.
package io.openmessaging.storage.dledger.entry;

public class DLedgerEntry {
    public static final int BODY_OFFSET = 48;
}
