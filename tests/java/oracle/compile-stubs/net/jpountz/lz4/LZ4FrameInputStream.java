// rmqfs oracle stub (our code): lz4-java is not in ~/.m2; RocketMQ 4.9.8's Lz4Compressor names
// these two streams. Constructing one throws: the oracle cannot decompress LZ4 bodies.
package net.jpountz.lz4;

public class LZ4FrameInputStream extends java.io.FilterInputStream {
    public LZ4FrameInputStream(java.io.InputStream in) throws java.io.IOException {
        super(in);
        throw new UnsupportedOperationException("compile-only stub");
    }
}
