// Loaded into every test file's process by scripts/run-tests.mjs (--import): at exit it appends the
// CPU the file used, its own and that of every child it waited for (agents, etcd, the CLI, ip, nft),
// to $TENDRIL_TEST_CPU_FILE. The cores, not the waits, bound CI's time: this says which files to cut.
import { appendFileSync, readFileSync } from 'node:fs';

const out = process.env.TENDRIL_TEST_CPU_FILE;
if (out) {
  process.on('exit', () => {
    // /proc/self/stat after the command's name: utime, stime, cutime and cstime are the 12th to 15th fields.
    const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1]?.split(' ') ?? [];
    const ticks = fields.slice(11, 15).reduce((s, f) => s + Number(f), 0);
    appendFileSync(out, `${ticks} ${process.argv[1] ?? '?'}\n`);
  });
}
