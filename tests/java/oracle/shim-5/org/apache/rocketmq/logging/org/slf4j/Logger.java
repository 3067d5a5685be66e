// rmqfs oracle shim (our code): RocketMQ 5.x logs through org.apache.rocketmq.logging.org.slf4j, a
// relocated copy of slf4j-api (io.github.aliyunmq:rocketmq-slf4j-api, not in ~/.m2). Here that
// Logger is plain slf4j's interface under the relocated name; LoggerFactory hands out proxies of
// it that forward every call to the org.slf4j logger of the same name (slf4j-simple at warn level).
package org.apache.rocketmq.logging.org.slf4j;

public interface Logger extends org.slf4j.Logger {
}
