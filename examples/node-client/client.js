#!/usr/bin/env node
'use strict';
/**
 * A Gauntlet client written in Node.js, built on the TypeScript/JavaScript
 * client generated from the .proto contracts (clients/typescript, by buf with
 * protoc-gen-es; no Python): it lists and describes environments, runs a
 * small campaign while watching its progress stream (its strategy parameters
 * built from the JSON Schema that ListStrategies serves), and shows how a gRPC
 * error status (NOT_FOUND) reaches a non-Python client. Messages are built
 * and read with the generated schemas (typed fields, enums, 64-bit integers as
 * BigInt); @grpc/grpc-js carries them, serialized by @bufbuild/protobuf.
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

/** The generated code (clients/typescript/gen), and the one @bufbuild/protobuf runtime it was built against. */
const GEN = path.resolve(__dirname, '..', '..', 'clients', 'typescript', 'gen', 'gauntlet', 'v1');
const { create, toBinary, fromBinary } = require(require.resolve('@bufbuild/protobuf', { paths: [GEN] }));
const { SimulatorService } = require(path.join(GEN, 'simulator_pb.js'));
const { GeneratorService, CampaignSpecSchema, CampaignState } = require(path.join(GEN, 'generator_pb.js'));

/** Deadline for unary calls, in seconds. */
const UNARY_DEADLINE_S = 30;
/** Deadline for the whole WatchCampaign stream, in seconds. */
const WATCH_DEADLINE_S = 110;

/** The strategy of the example's campaign; its parameters come from its schema (see strategyParams). */
const STRATEGY = 'prt';

/**
 * The campaign the example runs (examples/cartpole_prt.yaml, smaller): a typed CampaignSpec.
 * @param {object} params the strategy's parameters (a google.protobuf.Struct, as a plain JSON object)
 * @returns {object}
 */
function campaignSpec(params) {
  return create(CampaignSpecSchema, {
    name: 'node-client',
    subject: 'cartpole',
    model: { name: 'cartpole-ppo' },
    strategy: STRATEGY,
    strategyParams: params,
    seed: 1n,
    budget: { maxExecutions: 20n },
    batchSize: 10,
    parallelism: 10,
    repetitions: 1,
  });
}

/**
 * Why `value` does not fit a JSON Schema property, for the keywords a strategy's schema uses (type, enum,
 * bounds, anyOf); '' when it fits. A real client would hand the whole schema to a validator (Ajv).
 * @param {*} value
 * @param {object} prop the property's schema
 * @returns {string}
 */
function misfit(value, prop) {
  if (prop.anyOf) {
    return prop.anyOf.some((option) => misfit(value, option) === '') ? '' : 'fits none of anyOf';
  }
  if (prop.enum && !prop.enum.includes(value)) return `not one of ${prop.enum.join(', ')}`;
  const types = { number: 'number', integer: 'number', string: 'string', boolean: 'boolean' };
  if (prop.type === 'null') return value === null ? '' : 'not null';
  if (prop.type === 'array') return Array.isArray(value) ? '' : 'not a list';
  if (prop.type in types && typeof value !== types[prop.type]) return `not a ${prop.type}`;
  if (prop.type === 'integer' && !Number.isInteger(value)) return 'not an integer';
  if ('minimum' in prop && value < prop.minimum) return `below ${prop.minimum}`;
  if ('maximum' in prop && value > prop.maximum) return `above ${prop.maximum}`;
  if ('exclusiveMinimum' in prop && value <= prop.exclusiveMinimum) return `not above ${prop.exclusiveMinimum}`;
  if ('exclusiveMaximum' in prop && value >= prop.exclusiveMaximum) return `not below ${prop.exclusiveMaximum}`;
  return '';
}

/**
 * The strategy's parameters for the campaign, built from its StrategyInfo.params_schema (JSON Schema): every
 * parameter the schema declares, at its default, except `lam`, set to the smallest value its schema allows;
 * each value is checked against its property before anything is sent.
 * @param {grpc.Client} generator
 * @returns {Promise<object>}
 */
async function strategyParams(generator) {
  const listed = await unary(generator, 'ListStrategies', request(GeneratorService, 'ListStrategies', {}));
  const info = listed.strategies.find((s) => s.name === STRATEGY);
  if (!info) throw new Error(`the generator has no strategy ${STRATEGY}`);
  const schema = JSON.parse(info.paramsSchema);
  const params = {};
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    params[name] = name === 'lam' && 'minimum' in prop ? prop.minimum : prop.default;
    const why = misfit(params[name], prop);
    if (why) throw new Error(`${STRATEGY} parameter ${name}=${JSON.stringify(params[name])}: ${why}`);
  }
  const shown = Object.entries(params).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ');
  console.log(`${STRATEGY} parameters from its schema: ${shown}`);
  return params;
}

/**
 * A @grpc/grpc-js client class for a generated service descriptor: each method
 * is named as in the .proto and (de)serializes its generated message types.
 * @param {object} service a generated GenService, e.g. SimulatorService
 * @returns {typeof grpc.Client}
 */
function grpcClientClass(service) {
  const definition = {};
  for (const method of service.methods) {
    const streamsIn = method.methodKind === 'client_streaming' || method.methodKind === 'bidi_streaming';
    const streamsOut = method.methodKind === 'server_streaming' || method.methodKind === 'bidi_streaming';
    definition[method.name] = {
      path: `/${service.typeName}/${method.name}`,
      requestStream: streamsIn,
      responseStream: streamsOut,
      requestSerialize: (message) => Buffer.from(toBinary(method.input, message)),
      requestDeserialize: (bytes) => fromBinary(method.input, bytes),
      responseSerialize: (message) => Buffer.from(toBinary(method.output, message)),
      responseDeserialize: (bytes) => fromBinary(method.output, bytes),
    };
  }
  return grpc.makeGenericClientConstructor(definition, service.name);
}

/**
 * @param {object} service a generated GenService
 * @param {string} method an RPC name, e.g. "ListEnvironments"
 * @param {object} init the request's fields
 * @returns {object} the typed request message
 */
function request(service, method, init) {
  const found = service.methods.find((m) => m.name === method);
  if (!found) throw new Error(`${service.typeName} has no method ${method}`);
  return create(found.input, init);
}

/**
 * @param {number} state a CampaignState value
 * @returns {string} its name in the .proto, e.g. "CAMPAIGN_STATE_COMPLETED".
 */
function stateName(state) {
  const name = CampaignState[state];
  return name === undefined ? `CAMPAIGN_STATE_${state}` : `CAMPAIGN_STATE_${name}`;
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
 * @param {object} message the request, a generated message
 * @returns {Promise<object>}
 */
function unary(client, method, message) {
  return new Promise((resolve, reject) => {
    client[method](message, { deadline: deadline(UNARY_DEADLINE_S) }, (err, response) => {
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
  const d = p.domain.value; // the oneof: {case, value}
  switch (p.domain.case) {
    case 'real':
      return `real [${d.low}, ${d.high}]`;
    case 'integer':
      return `integer [${d.low}, ${d.high}]`;
    case 'categorical':
      return `one of {${d.choices.join(', ')}}`;
    case 'integerSet':
      return `integer in {${d.values.join(', ')}}`;
    case 'sequence': {
      const fields = d.fields.map((f) => `${f.name}: ${describeDomain(f)}`).join('; ');
      return `sequence of ${d.minLength}..${d.maxLength} records {${fields}}`;
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
  const spec = campaignSpec(await strategyParams(generator));
  const started = await unary(generator, 'StartCampaign', request(GeneratorService, 'StartCampaign', { spec }));
  const campaignId = started.status.campaignId;
  console.log(`campaign ${campaignId} started (${stateName(started.status.state)})`);

  let last = started.status;
  const call = generator.WatchCampaign(request(GeneratorService, 'WatchCampaign', { campaignId }),
    { deadline: deadline(WATCH_DEADLINE_S) });
  await drain(call, (event) => {
    if (event.status) last = event.status;
    const note = event.message ? ` - ${event.message}` : '';
    const s = event.status;
    const progress = s ? `${stateName(s.state)} executions=${s.executions} failures=${s.failures}` : '';
    console.log(`  [${event.kind}] ${progress}${note}`);
  });

  // The stream ends when the campaign does; if its last event raced the final
  // state change, ask once more for the stored status.
  if (last.state === CampaignState.RUNNING) {
    last = (await unary(generator, 'GetCampaign', request(GeneratorService, 'GetCampaign', { campaignId }))).status;
  }
  return last;
}

/**
 * Shows a gRPC error status as data rather than a crash.
 * @param {grpc.Client} simulator
 */
async function demonstrateNotFound(simulator) {
  try {
    await unary(simulator, 'DescribeEnvironment',
      request(SimulatorService, 'DescribeEnvironment', { subject: 'no-such-subject' }));
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
  const credentials = grpc.credentials.createInsecure();
  const simulator = new (grpcClientClass(SimulatorService))(endpoints.simulator, credentials);
  const generator = new (grpcClientClass(GeneratorService))(endpoints.generator, credentials);
  try {
    // a. subjects
    const envs = await unary(simulator, 'ListEnvironments', request(SimulatorService, 'ListEnvironments', {}));
    console.log(`subjects: ${envs.environments.map((e) => e.subject).join(', ')}`);

    // b. parameter space of cartpole
    const described = await unary(simulator, 'DescribeEnvironment',
      request(SimulatorService, 'DescribeEnvironment', { subject: 'cartpole' }));
    console.log(`cartpole (${described.summary.envId}, max_steps=${described.maxSteps}, ` +
                `oracle=${described.defaultOracle}) parameters:`);
    for (const p of described.parameterSpace.parameters) {
      const unit = p.unit ? ` ${p.unit}` : '';
      console.log(`  ${p.name}: ${describeDomain(p)}${unit}`);
    }

    // c. a campaign (its strategy parameters from ListStrategies' schema), watched to its end
    const status = await runCampaign(generator);

    // d. error handling: an unknown subject is a NOT_FOUND status
    await demonstrateNotFound(simulator);

    const summary = {
      campaign_id: status.campaignId,
      executions: Number(status.executions),
      failures: Number(status.failures),
      state: stateName(status.state),
    };
    console.log(JSON.stringify(summary));
    if (status.state !== CampaignState.COMPLETED) {
      const why = status.error || status.stopReason || 'no reason given';
      throw new Error(`campaign ${status.campaignId} ended ${summary.state}: ${why}`);
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

module.exports = { main, grpcClientClass, describeDomain, misfit, statusName, stateName };
