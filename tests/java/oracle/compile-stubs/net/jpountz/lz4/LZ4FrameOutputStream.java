// rmqfs oracle stub (our code): lz4-java is not in ~/.m2; RocketMQ 4.9.8's Lz4Compressor names
// these two streams. Constructing one throws: the oracle cannot decompress LZ4 bodies.
package net.jpountz.lz4;

public class LZ4FrameOutputStream extends java.io.FilterOutputStream {
    public LZ4FrameOutputStream(java.io.OutputStream out) throws java.io.IOException {
        super(out);
        throw new UnsupportedOperationException("compile-only stub");
    }
}
