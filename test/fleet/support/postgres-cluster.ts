import { chownSync, chmodSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import pg from 'pg';

/** A private PostgreSQL cluster from Debian's packages, on a unix socket in a temp directory. */
export interface PostgresCluster {
  /** A new, empty database; its URL. */
  createDatabase(): Promise<string>;
  /** Stops the server (a fault: every connection breaks, new ones are refused); data kept. */
  halt(): Promise<void>;
  /** Starts the halted server again, on the same socket and data. */
  resume(): Promise<void>;
  stop(): Promise<void>;
}

function findBin(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  const bin = versions
    .map((v) => join(root, v, 'bin'))
    .find((dir) => existsSync(join(dir, 'initdb')));
  if (bin === undefined) {
    throw new Error(
      'PostgreSQL is not installed: run scripts/setup.sh as root (apt-get install postgresql)',
    );
  }
  return bin;
}

/** initdb and start a throwaway cluster as the postgres user (the server refuses to run as root). */
export async function startPostgresCluster(): Promise<PostgresCluster> {
  const bin = findBin();
  const dir = mkdtempSync(join(tmpdir(), 'egressguard-pg-'));
  const uid = Number((await execa('id', ['-u', 'postgres'])).stdout);
  const gid = Number((await execa('id', ['-g', 'postgres'])).stdout);
  chmodSync(dir, 0o755);
  chownSync(dir, uid, gid);
  const asPostgres = (command: string, args: string[]) =>
    execa('/usr/sbin/runuser', ['-u', 'postgres', '--', join(bin, command), ...args], { cwd: dir });
  const data = join(dir, 'data');
  await asPostgres('initdb', [
    '-D',
    data,
    '-A',
    'trust',
    '-U',
    'postgres',
    '--no-sync',
    '-E',
    'UTF8',
  ]);
  const start = () =>
    asPostgres('pg_ctl', [
      '-D',
      data,
      '-l',
      join(dir, 'server.log'),
      '-w',
      '-t',
      '60',
      '-o',
      `-k ${dir} -c listen_addresses= -c fsync=off -c max_connections=300`,
      'start',
    ]);
  await start();
  const urlOf = (database: string) =>
    `postgres:///${database}?host=${encodeURIComponent(dir)}&user=postgres`;
  let count = 0;
  return {
    createDatabase: async () => {
      count += 1;
      const name = `fleet_${process.pid}_${count}`;
      const client = new pg.Client({ connectionString: urlOf('postgres') });
      await client.connect();
      try {
        await client.query(`create database ${name}`);
      } finally {
        await client.end();
      }
      return urlOf(name);
    },
    // Fast shutdown: sessions are terminated (57P01), as when an operator stops the service.
    halt: async () => {
      await asPostgres('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
    },
    resume: async () => {
      await start();
    },
    stop: async () => {
      await asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(
        () => undefined,
      );
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
