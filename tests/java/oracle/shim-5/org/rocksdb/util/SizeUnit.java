// rmqfs oracle stub (our code, not rocksdbjni's): MessageStoreConfig's rocksdbWalFileRollingThreshold
// defaults to SizeUnit.GB.
package org.rocksdb.util;

public final class SizeUnit {
    public static final long KB = 1024L;
    public static final long MB = KB * KB;
    public static final long GB = KB * MB;
    public static final long TB = KB * GB;
    public static final long PB = KB * TB;

    private SizeUnit() {
    }
}
