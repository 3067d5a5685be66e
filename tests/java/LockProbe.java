// What a RocketMQ broker does to its store's lock file (DefaultMessageStore: new RandomAccessFile(
// <root>/lock, "rw"), getChannel().tryLock(0, 1, false)), as a one-file program: `java
// LockProbe.java STORE [hold]`. Prints "locked <pid>" when it got the lock, "busy" when
// tryLock returned null (another process holds it). With "hold" it keeps the lock until its
// standard input closes.
import java.io.File;
import java.io.RandomAccessFile;
import java.nio.channels.FileLock;

public class LockProbe {
    public static void main(String[] args) throws Exception {
        RandomAccessFile file = new RandomAccessFile(new File(args[0], "lock"), "rw");
        FileLock lock = file.getChannel().tryLock(0, 1, false);
        if (lock == null) {
            System.out.println("busy");
            System.exit(3);
        }
        System.out.println("locked " + ProcessHandle.current().pid());
        System.out.flush();
        if (args.length > 1 && args[1].equals("hold")) {
            while (System.in.read() != -1) { }
        }
        lock.release();
        file.close();
    }
}
