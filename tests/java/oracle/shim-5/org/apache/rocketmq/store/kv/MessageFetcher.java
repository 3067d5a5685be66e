// rmqfs oracle stub (our code, NOT RocketMQ's class): RocketMQ 5.3.3's MessageFetcher pulls a
// compaction topic from the master through a NettyRemotingClient (netty-handler, netty-codec and
// netty-common are not in ~/.m2). CompactionLog names it only when a slave catches up a compacted
// topic; the oracle runs no compaction topic and no slave, so the constructor is never called.
package org.apache.rocketmq.store.kv;

import java.io.IOException;
import java.util.function.BiFunction;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

public class MessageFetcher implements AutoCloseable {
    public MessageFetcher() {
        throw new UnsupportedOperationException("compaction pulls are not part of the rmqfs oracle");
    }

    @Override
    public void close() throws IOException {
    }

    public void pullMessageFromMaster(String topic, int queueId, long endOffset, String masterAddr,
        BiFunction<Long, RemotingCommand, Boolean> responseHandler) throws Exception {
        throw new UnsupportedOperationException("compaction pulls are not part of the rmqfs oracle");
    }
}
