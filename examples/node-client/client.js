#!/usr/bin/env node
'use strict';
/**
 * A Gauntlet client written in Node.js, built from the .proto contracts alone
 * (no generated code, no Python): it lists and describes environments, runs a
 * small campaign while watching its progress stream, and shows how a gRPC
 * error status (NOT_FOUND) reaches a non-Python client.
 *
 * Usage:
 *   node client.js --simulator HOST:PORT --generator HOST:PORT
 *
 * Output: human-readable lines, then as the very last stdout line a JSON
 * summary {"campaign_id", "executions", "failures", "state"}.
 * Exit status: 0 on success, 1 (with a one-line message on stderr) otherwise.
 */

const path = require('node:path');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'protos');
const PROTO_FILES = ['gauntlet/v1/simulator.proto', 'gauntlet/v1/generator.proto'];

/** Deadline for unary calls, in seconds. */
const UNARY_DEADLINE_S = 30;
/** Deadline for the whole WatchCampaign stream, in seconds. */
const WATCH_DEADLINE_S = 110;

/** Campaign the example runs (mirrors examples/cartpole_random.yaml, smaller). */
const CAMPAIGN_SPEC = {
  name: 'node-client',
  subject: 'cartpole',
  model: { name: 'cartpole-ppo' },
  strategy: 'random',
  seed: 1,
  budget: { max_executions: 20 },
  batch_size: 10,
  parallelism: 10,
  repetitions: 1,
};

/**
 * Loads the gauntlet.v1 package from the .proto files.
 * @returns {object} the `gauntlet.v1` namespace of service constructors.
 */
function loadGauntlet() {
  const definition = protoLoader.loadSync(PROTO_FILES, {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).gauntlet.v1;
}

/**
 * @param {number} seconds
 * @returns {Date} a deadline `seconds` from now.
 */
function deadline(seconds) {
  return new Date(Date.now() + seconds * 1000);
}

/**
 * Calls a unary method and returns a promise of its response.
 * @param {grpc.Client} client
 * @param {string} method
 * @param {object} request
 * @returns {Promise<object>}
 */
function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: deadline(UNARY_DEADLINE_S) }, (err, response) => {
      if (err) reject(err);
      else resolve(response);
    });
  });
}

/**
 * Consumes a server stream to its end.
 * @param {grpc.ClientReadableStream} call
 * @param {(message: object) => void} onMessage
 * @returns {Promise<void>} resolved when the server closes the stream with OK.
 */
function drain(call, onMessage) {
  return new Promise((resolve, reject) => {
    let failed = false;
    call.on('data', (message) => {
      try {
        onMessage(message);
      } catch (err) {
        failed = true;
        call.cancel();
        reject(err);
      }
    });
    call.on('error', (err) => {
      failed = true;
      reject(err);
    });
    call.on('end', () => {
      if (!failed) resolve();
    });
  });
}

/**
 * @param {number} code a gRPC status code
 * @returns {string} its name, e.g. "NOT_FOUND".
 */
function statusName(code) {
  const name = Object.keys(grpc.status).find((key) => grpc.status[key] === code);
  return name || `CODE_${code}`;
}

/**
 * @param {Error & {code?: number, details?: string}} err
 * @returns {boolean} true for an error carrying a gRPC status.
 */
function isGrpcError(err) {
  return err != null && typeof err.code === 'number' && typeof err.details === 'string';
}

/**
 * A one-line description of a parameter's domain.
 * @param {object} p a gauntlet.v1.Parameter
 * @returns {string}
 */
function describeDomain(p) {
  switch (p.domain) {
    case 'real':
      return `real [${p.real.low}, ${p.real.high}]`;
    case 'integer':
      return `integer [${p.integer.low}, ${p.integer.high}]`;
    case 'categorical':
      return `one of {${p.categorical.choices.join(', ')}}`;
    case 'integer_set':
      return `integer in {${p.integer_set.values.join(', ')}}`;
    case 'sequence': {
      const fields = p.sequence.fields.map((f) => `${f.name}: ${describeDomain(f)}`).join('; ');
      return `sequence of ${p.sequence.min_length}..${p.sequence.max_length} records {${fields}}`;
    }
    default:
      return 'unconstrained';
  }
}

/**
 * @param {string[]} argv
 * @returns {{simulator: string, generator: string}}
 */
function parseCommandLine(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      simulator: { type: 'string' },
      generator: { type: 'string' },
    },
    strict: true,
  });
  for (const name of ['simulator', 'generator']) {
    if (!values[name]) throw new Error(`missing --${name} HOST:PORT`);
  }
  return { simulator: values.simulator, generator: values.generator };
}

/**
 * Runs the campaign and watches it to the end.
 * @param {grpc.Client} generator
 * @returns {Promise<object>} the final gauntlet.v1.CampaignStatus.
 */
async function runCampaign(generator) {
  const started = await unary(generator, 'StartCampaign', { spec: CAMPAIGN_SPEC });
  const campaignId = started.status.campaign_id;
  console.log(`campaign ${campaignId} started (${started.status.state})`);

  let last = started.status;
  const call = generator.WatchCampaign({ campaign_id: campaignId }, { deadline: deadline(WATCH_DEADLINE_S) });
  await drain(call, (event) => {
    if (event.status) last = event.status;
    const s = event.status || {};
    const note = event.message ? ` - ${event.message}` : '';
    console.log(`  [${event.kind}] ${s.state} executions=${s.executions} failures=${s.failures}${note}`);
  });

  // The stream ends when the campaign does; if its last event raced the final
  // state change, ask once more for the stored status.
  if (last.state === 'CAMPAIGN_STATE_RUNNING') {
    last = (await unary(generator, 'GetCampaign', { campaign_id: campaignId })).status;
  }
  return last;
}

/**
 * Shows a gRPC error status as data rather than a crash.
 * @param {grpc.Client} simulator
 */
async function demonstrateNotFound(simulator) {
  try {
    await unary(simulator, 'DescribeEnvironment', { subject: 'no-such-subject' });
    console.log('DescribeEnvironment(no-such-subject) unexpectedly succeeded');
  } catch (err) {
    if (!isGrpcError(err)) throw err;
    console.log(`DescribeEnvironment(no-such-subject) -> ${statusName(err.code)}: ${err.details}`);
  }
}

/**
 * @param {string[]} argv command-line arguments after the script name
 * @returns {Promise<number>} the exit status.
 */
async function main(argv) {
  const endpoints = parseCommandLine(argv);
  const gauntlet = loadGauntlet();
  const credentials = grpc.credentials.createInsecure();
  const simulator = new gauntlet.SimulatorService(endpoints.simulator, credentials);
  const generator = new gauntlet.GeneratorService(endpoints.generator, credentials);
  try {
    // a. subjects
    const envs = await unary(simulator, 'ListEnvironments', {});
    console.log(`subjects: ${envs.environments.map((e) => e.subject).join(', ')}`);

    // b. parameter space of cartpole
    const described = await unary(simulator, 'DescribeEnvironment', { subject: 'cartpole' });
    console.log(`cartpole (${described.summary.env_id}, max_steps=${described.max_steps}, ` +
                `oracle=${described.default_oracle}) parameters:`);
    for (const p of described.parameter_space.parameters) {
      const unit = p.unit ? ` ${p.unit}` : '';
      console.log(`  ${p.name}: ${describeDomain(p)}${unit}`);
    }

    // c. a campaign, watched to its end
    const status = await runCampaign(generator);

    // d. error handling: an unknown subject is a NOT_FOUND status
    await demonstrateNotFound(simulator);

    const summary = {
      campaign_id: status.campaign_id,
      executions: Number(status.executions),
      failures: Number(status.failures),
      state: status.state,
    };
    console.log(JSON.stringify(summary));
    if (status.state !== 'CAMPAIGN_STATE_COMPLETED') {
      const why = status.error || status.stop_reason || 'no reason given';
      throw new Error(`campaign ${status.campaign_id} ended ${status.state}: ${why}`);
    }
    return 0;
  } finally {
    simulator.close();
    generator.close();
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      const what = isGrpcError(err) ? `${statusName(err.code)}: ${err.details}` : (err && err.message) || String(err);
      console.error(`node-client: error: ${String(what).split('\n')[0]}`);
      process.exitCode = 1;
    },
  );
}

module.exports = { main, loadGauntlet, describeDomain, statusName };
