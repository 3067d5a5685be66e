// rmqfs oracle stub (our code, not rocksdbjni's): RocketMQ 5.3.3's store interfaces declare
// `throws RocksDBException` ("only in rocksdb mode") all over the file-based read path, and
// rocksdbjni is not in ~/.m2. The oracle never runs RocksDB, so nothing throws it.
package org.rocksdb;

public class RocksDBException extends Exception {
    public RocksDBException(String message) {
        super(message);
    }
}
