// rmqfs oracle stub (our code, NOT RocketMQ's class): RocketMQ 5.3.3's RocksDBMessageStore and the
// RocksDB ConsumeQueue behind it need rocksdbjni, which is not in ~/.m2, so the build leaves that
// class out and compiles this stand-in for the three things DefaultMessageStore names (a field of
// this type, enableRocksdbCQWrite's constructor call and its two methods). The oracle runs with the
// default storeType (file ConsumeQueue) and never enables RocksDB ConsumeQueue double writes, so
// the constructor is never called.
package org.apache.rocketmq.store;

import java.io.IOException;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class RocksDBMessageStore extends DefaultMessageStore {
    public RocksDBMessageStore(MessageStoreConfig messageStoreConfig, BrokerStatsManager brokerStatsManager,
        MessageArrivingListener messageArrivingListener, BrokerConfig brokerConfig,
        ConcurrentMap<String, TopicConfig> topicConfigTable) throws IOException {
        super(messageStoreConfig, brokerStatsManager, messageArrivingListener, brokerConfig, topicConfigTable);
        throw new UnsupportedOperationException("RocksDB is not part of the rmqfs oracle");
    }

    public void loadAndStartConsumerServiceOnly() {
        throw new UnsupportedOperationException("RocksDB is not part of the rmqfs oracle");
    }

    public CommitLogDispatcher getDispatcherBuildRocksdbConsumeQueue() {
        throw new UnsupportedOperationException("RocksDB is not part of the rmqfs oracle");
    }
}
