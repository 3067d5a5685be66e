// rmqfs oracle shim (our code, not netty's): netty-common is not in ~/.m2, and RocketMQ 5.3.3's
// UtilAll.cleanBuffer (MappedFile cleanup on shutdown and destroy) frees a mapped buffer with
// PlatformDependent.freeDirectBuffer. This does what netty does on Java 9+: Unsafe.invokeCleaner.
// Nothing else of netty's class is here; the read path names nothing else of it.
package io.netty.util.internal;

import java.lang.reflect.Field;
import java.nio.ByteBuffer;

public final class PlatformDependent {
    private static final sun.misc.Unsafe UNSAFE;

    static {
        try {
            Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            UNSAFE = (sun.misc.Unsafe) f.get(null);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private PlatformDependent() {
    }

    public static void freeDirectBuffer(ByteBuffer buffer) {
        if (buffer != null && buffer.isDirect()) {
            UNSAFE.invokeCleaner(buffer);
        }
    }
}
