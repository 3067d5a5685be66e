// rmqfs oracle stub (our code, not rocksdbjni's): MessageStoreConfig's field initializers take two
// RocksDB compression names from this enum (config values only; nothing compresses with them).
// The library names are RocksDB's own spellings of the two.
package org.rocksdb;

public enum CompressionType {
    LZ4_COMPRESSION("lz4"),
    ZSTD_COMPRESSION("zstd");

    private final String libraryName;

    CompressionType(String libraryName) {
        this.libraryName = libraryName;
    }

    public String getLibraryName() {
        return libraryName;
    }
}
