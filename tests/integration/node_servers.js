// The servers of node.sh, in two shapes node programs take.
//   node node_servers.js cluster PORT: a cluster of two workers behind one
//     listener. On Linux the primary accepts and passes each connection to
//     a worker (SCM_RIGHTS over the cluster's channel); the worker answers
//     with 1 KB of 'x' and names itself in X-Worker.
//   node node_servers.js closer PORT: answers the first bytes of each
//     connection with "bye:" and them, then closes it (libuv closes with
//     syscall(SYS_close)); the client reads to the end.
// SIGTERM ends every process with exit(0), so each writes its counters.
'use strict';
const cluster = require('cluster');
const http = require('http');
const net = require('net');
const [mode, port] = [process.argv[2], +process.argv[3]];

function onTerm(fn) { process.on('SIGTERM', fn); }

if (mode === 'cluster' && cluster.isPrimary) {
  let left = 2;
  for (let i = 0; i < left; i++) cluster.fork();
  cluster.on('exit', () => { if (--left === 0) process.exit(0); });
  onTerm(() => { for (const w of Object.values(cluster.workers)) w.process.kill('SIGTERM'); });
  cluster.on('listening', () => { if (++listening === 2) console.log('listening'); });
  var listening = 0;
} else if (mode === 'cluster') {
  const body = Buffer.alloc(1024, 'x');
  http.createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/plain', 'X-Worker': String(process.pid) });
    res.end(body);
  }).listen(port, '127.0.0.1');
  onTerm(() => process.exit(0));
} else if (mode === 'closer') {
  net.createServer((s) => {
    s.once('data', (d) => { s.write('bye:' + d); s.destroy(); });
  }).listen(port, '127.0.0.1', () => console.log('listening'));
  onTerm(() => process.exit(0));
} else {
  console.error('usage: node node_servers.js cluster|closer PORT');
  process.exit(2);
}
