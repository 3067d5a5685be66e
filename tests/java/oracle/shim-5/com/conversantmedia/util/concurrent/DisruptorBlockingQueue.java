// rmqfs oracle shim (our code, not Conversant's): RocketMQ 5.3.3's TimerMessageStore may queue
// through Conversant's DisruptorBlockingQueue (not in ~/.m2); a bounded blocking queue of the same
// capacity is what it needs. The oracle does not run the timer store.
package com.conversantmedia.util.concurrent;

import java.util.concurrent.ArrayBlockingQueue;

public class DisruptorBlockingQueue<E> extends ArrayBlockingQueue<E> {
    public DisruptorBlockingQueue(int capacity) {
        super(capacity);
    }
}
