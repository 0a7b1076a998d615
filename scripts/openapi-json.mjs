// api/openapi.yaml as JSON (dist/api/openapi.json), which the agent reads at start: parsing the YAML
// took a fifth of a second of every start. The YAML stays the one source.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parse } from 'yaml';

const [from, to] = process.argv.slice(2);
mkdirSync(dirname(to), { recursive: true });
writeFileSync(to, JSON.stringify(parse(readFileSync(from, 'utf8'))));
