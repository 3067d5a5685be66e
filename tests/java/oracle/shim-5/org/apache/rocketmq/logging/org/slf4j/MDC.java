// rmqfs oracle shim (our code): the relocated MDC (see Logger), forwarding to org.slf4j.MDC.
package org.apache.rocketmq.logging.org.slf4j;

public final class MDC {
    private MDC() {
    }

    public static void put(String key, String val) {
        org.slf4j.MDC.put(key, val);
    }

    public static String get(String key) {
        return org.slf4j.MDC.get(key);
    }

    public static void remove(String key) {
        org.slf4j.MDC.remove(key);
    }

    public static void clear() {
        org.slf4j.MDC.clear();
    }
}
