// A JVM program for the preload tests (programs_test.py): collections, strings, a parallel stream
// (the fork-join pool's threads) and zip, printing results that do not depend on the allocator.
// The JVM itself mallocs for its compiler, class metadata, threads and zip buffers.
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.*;
import java.util.stream.*;
import java.util.zip.*;

public class JvmWorkload {
  public static void main(String[] args) throws Exception {
    Map<String, List<Integer>> groups = new HashMap<>();
    StringBuilder text = new StringBuilder();
    for (int i = 0; i < 300000; i++) {
      groups.computeIfAbsent("k" + (i * 7919 % 10007), k -> new ArrayList<>()).add(i);
      if (i % 5 == 0) text.append(i).append(':').append("x".repeat(i % 40)).append('\n');
    }
    long sum = IntStream.range(0, 2_000_000).parallel().mapToLong(i -> (long) i * (i % 13)).sum();
    List<String> keys = groups.keySet().stream().sorted().limit(5).collect(Collectors.toList());
    byte[] raw = text.toString().getBytes(StandardCharsets.UTF_8);
    Deflater deflater = new Deflater();
    deflater.setInput(raw);
    deflater.finish();
    byte[] buf = new byte[raw.length];
    int packed = deflater.deflate(buf);
    deflater.end();
    Inflater inflater = new Inflater();
    inflater.setInput(buf, 0, packed);
    byte[] back = new byte[raw.length];
    int unpacked = inflater.inflate(back);
    inflater.end();
    MessageDigest sha = MessageDigest.getInstance("SHA-256");
    StringBuilder hex = new StringBuilder();
    for (byte b : sha.digest(back)) hex.append(String.format("%02x", b));
    System.out.println(groups.size() + " " + sum + " " + keys + " " + raw.length + " " + (unpacked == raw.length)
                       + " " + Arrays.equals(raw, back) + " " + hex);
  }
}
