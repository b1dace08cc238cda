#!/usr/bin/env python3
"""Real programs of other kinds under LD_PRELOAD=libstrata.so (issue 13): git on a generated
repository, perl, sqlite3, a JVM program and node, each compared with its run without strata
(preload_check.Checker).  A program that is not installed is skipped, saying so: scripts/setup.sh
installs them all (make test runs it first).  Usage:
    programs_test.py <libstrata.so>
"""
import os
import random
import shutil
import sys
import tempfile

from preload_check import Checker

LIB = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def missing(checker, name, program, package):
    if shutil.which(program):
        return False
    checker.skip(name, f"{program} is not installed (scripts/setup.sh installs the Debian package {package})")
    return True


def fast_import_stream(commits=60, files=40, seed=11):
    """A git fast-import stream: a history of edits, renames-by-copy and deletions over `files`
    text files, with fixed authors and dates, so that every object id is the same on each run."""
    rng = random.Random(seed)
    words = ["alloc", "free", "page", "segment", "heap", "span", "slice", "block", "class", "thread"]
    content = {f"src/f{i:02}.txt": [f"line {j} {rng.choice(words)}" for j in range(rng.randrange(20, 400))]
               for i in range(files)}
    out = []
    for c in range(commits):
        changed = {}
        for name in rng.sample(sorted(content), rng.randrange(1, 8)):
            lines = content[name]
            for _ in range(rng.randrange(1, 30)):
                at = rng.randrange(len(lines) + 1)
                if rng.random() < 0.3 and lines:
                    del lines[min(at, len(lines) - 1)]
                else:
                    lines.insert(at, f"edit {c} {rng.choice(words)} {rng.randrange(10**6)}")
            changed[name] = lines
        if c % 10 == 9:
            new = f"src/n{c:02}.txt"
            content[new] = list(content[rng.choice(sorted(content))])
            changed[new] = content[new]
        out.append(f"commit refs/heads/main\nmark :{c + 1}\n"
                   f"author Test <test@example.com> {1600000000 + c * 3600} +0000\n"
                   f"committer Test <test@example.com> {1600000000 + c * 3600} +0000\n")
        message = f"change {c}: {' '.join(rng.sample(words, 3))}\n"
        out.append(f"data {len(message)}\n{message}")
        if c:
            out.append(f"from :{c}\n")
        for name, lines in sorted(changed.items()):
            data = "\n".join(lines) + "\n"
            out.append(f"M 100644 inline {name}\ndata {len(data.encode())}\n{data}")
        out.append("\n")
    return "".join(out).encode()


GIT_SCRIPT = r"""
set -e
git init -q -b main repo
cd repo
git fast-import --quiet < ../history
git reset -q --hard main
git log --stat --format='%H %an %s' | head -400
git rev-list --objects --all | sort | sha256sum
git repack -adq
git fsck --full --strict --no-progress
git diff HEAD~30 HEAD --stat | tail -5
git diff HEAD~45 HEAD | sha256sum
git blame -s src/f03.txt | sha256sum
git grep -c segment HEAD~20 | sort | head -20
git gc -q --aggressive
git count-objects -v | grep -E '^(count|in-pack)'
git log --all --oneline | wc -l
"""

PERL_SCRIPT = r"""
use strict; use warnings; use Digest::MD5 qw(md5_hex);
my %h; my @list;
for my $i (1 .. 200000) {
    my $k = join('-', 'key', $i % 9973, $i);
    $h{$k} = [$i, 'v' x ($i % 97), { n => $i }];
    push @list, sprintf('%07d:%s', ($i * 7919) % 1000003, $k) if $i % 3 == 0;
}
my @sorted = sort @list;
my $text = join("\n", map { my $s = $_; $s =~ s/key-(\d+)/K$1/g; $s } @sorted);
my %count; $count{length $_->[1]}++ for values %h;
delete $h{$_} for grep { /5$/ } keys %h;
print scalar(keys %h), " ", length($text), " ", md5_hex($text), "\n";
print join(",", map { "$_=$count{$_}" } (sort { $a <=> $b } keys %count)[0 .. 9]), "\n";
"""

SQL_SCRIPT = """
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v INTEGER, payload TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)
INSERT INTO t(k, v, payload) SELECT 'k' || (i * 7919 % 10007), i * 31 % 1000, printf('%.*c', i % 200, 'x') FROM n;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_v ON t(v, k);
SELECT count(*), sum(v), sum(length(payload)) FROM t;
SELECT k, count(*), max(v) FROM t GROUP BY k ORDER BY count(*) DESC, k LIMIT 5;
SELECT v, group_concat(id, ',') FROM (SELECT v, id FROM t WHERE v < 3 ORDER BY id LIMIT 30) GROUP BY v;
UPDATE t SET payload = upper(payload) || k WHERE v % 7 = 0;
DELETE FROM t WHERE v % 5 = 0;
SELECT count(*), sum(length(payload)), total(v) FROM t;
SELECT json_group_array(json_object('k', k, 'n', n)) FROM (SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k LIMIT 8);
VACUUM;
PRAGMA integrity_check;
"""

NODE_SCRIPT = r"""
const zlib = require('zlib'), crypto = require('crypto');
const items = [];
for (let i = 0; i < 200000; i++) items.push({id: i, name: 'n'.repeat(i % 50), tags: [i % 7, i % 11]});
const json = JSON.stringify(items);
const back = JSON.parse(json);
const bufs = [];
for (let i = 0; i < 2000; i++) bufs.push(Buffer.alloc(1 + (i * 7919) % 65536, i % 251));
const all = Buffer.concat(bufs);
const packed = zlib.deflateSync(all);
const unpacked = zlib.inflateSync(packed);
const m = new Map();
for (const it of back) m.set('k' + (it.id % 10007), (m.get('k' + (it.id % 10007)) || 0) + it.name.length);
console.log(json.length, back.length, all.length, unpacked.equals(all), m.size,
            crypto.createHash('sha256').update(json).update(unpacked).digest('hex'));
"""


def main():
    checker = Checker(LIB)
    with tempfile.TemporaryDirectory() as work:
        if not missing(checker, "git on a generated repository", "git", "git"):
            with open(os.path.join(work, "history"), "wb") as f:
                f.write(fast_import_stream())
            env = dict(os.environ, HOME=work, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null",
                       GIT_AUTHOR_DATE="1600000000 +0000", GIT_COMMITTER_DATE="1600000000 +0000")
            # Each run starts from no repository: `repo` is made and removed around it.
            script = f"rm -rf repo; {GIT_SCRIPT}\ncd ..; rm -rf repo"
            checker.check("git on a generated repository", ["bash", "-c", script], env=env, cwd=work,
                          min_mallocs=20000)

        if not missing(checker, "perl hashes, sort and regexes", "perl", "perl"):
            checker.check("perl hashes, sort and regexes", ["perl", "-e", PERL_SCRIPT], min_mallocs=100000)

        if not missing(checker, "sqlite3 table, indexes and queries", "sqlite3", "sqlite3"):
            db = os.path.join(work, "t.db")
            script = f"rm -f {db}; sqlite3 {db} < {os.path.join(work, 't.sql')}; rm -f {db}"
            with open(os.path.join(work, "t.sql"), "w") as f:
                f.write(SQL_SCRIPT)
            checker.check("sqlite3 table, indexes and queries", ["bash", "-c", script], min_mallocs=100000)

        if not missing(checker, "JVM program", "java", "openjdk-17-jdk-headless"):
            # The source launcher compiles the program in the same JVM (javac's heap of objects).
            checker.check("JVM program", ["java", "-Xmx512m", os.path.join(HERE, "JvmWorkload.java")],
                          min_mallocs=10000)

        if not missing(checker, "node objects, JSON, buffers and zlib", "node", "nodejs"):
            checker.check("node objects, JSON, buffers and zlib", ["node", "-e", NODE_SCRIPT], min_mallocs=10000)
    return checker.summary()


if __name__ == "__main__":
    sys.exit(main())
