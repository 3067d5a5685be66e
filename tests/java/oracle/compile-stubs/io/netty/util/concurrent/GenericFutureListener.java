// rmqfs oracle stub (our code): netty-common is not in ~/.m2, but netty-buffer and netty-transport,
// which RocketMQ 4.9.8 compiles against, name this type. Types only, no behaviour: build.py puts
// compile-stubs/ last on the class path, because the JVM's verifier loads a few of these types when
// RemotingUtil (which BrokerConfig's field initializers call) is loaded. The store's read path
// uses no netty object; anything that did would fail (NoClassDefFoundError on the rest of netty-common).
package io.netty.util.concurrent;

public interface GenericFutureListener<F extends Future<?>> extends java.util.EventListener {
    void operationComplete(F future) throws Exception;
}
