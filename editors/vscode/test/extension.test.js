// Headless test of editors/vscode/extension.js with fake `vscode` and `vscode-languageclient`
// modules: the client starts `dp lsp` over stdio, and the commands are registered and work.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const Module = require('node:module');
const path = require('node:path');

const EXTENSION = path.resolve(__dirname, '..', 'extension.js');

function fakeEnvironment(settings = {}) {
  const log = { clients: [], commands: new Map(), terminalText: [], warnings: [], saved: 0 };
  const config = { path: 'dp', 'server.enable': true, ...settings };
  const terminal = { name: 'dp', show() {}, sendText: (t) => log.terminalText.push(t) };
  const vscode = {
    workspace: {
      getConfiguration: (section) => {
        assert.equal(section, 'dp');
        return { get: (key, dflt) => (key in config ? config[key] : dflt) };
      },
      createFileSystemWatcher: (glob) => ({ glob, dispose() {} }),
      onDidChangeConfiguration: () => ({ dispose() {} }),
    },
    commands: {
      registerCommand: (name, fn) => {
        log.commands.set(name, fn);
        return { dispose() {} };
      },
    },
    window: {
      activeTextEditor: undefined,
      terminals: [],
      createTerminal: () => terminal,
      showWarningMessage: (m) => log.warnings.push(m),
      showInformationMessage: (m) => log.warnings.push(m),
    },
  };
  class LanguageClient {
    constructor(id, name, serverOptions, clientOptions) {
      Object.assign(this, { id, name, serverOptions, clientOptions, running: false });
      log.clients.push(this);
    }
    async start() {
      this.running = true;
    }
    async stop() {
      this.running = false;
    }
  }
  const languageclient = { LanguageClient, TransportKind: { stdio: 0, ipc: 1 } };
  return { vscode, languageclient, log };
}

function loadExtension(env) {
  const originalLoad = Module._load;
  Module._load = function (request, parent, isMain) {
    if (request === 'vscode') return env.vscode;
    if (request === 'vscode-languageclient/node') return env.languageclient;
    return originalLoad.call(this, request, parent, isMain);
  };
  try {
    delete require.cache[EXTENSION];
    return require(EXTENSION);
  } finally {
    Module._load = originalLoad;
  }
}

test('activate starts `dp lsp` over stdio for dp documents', async () => {
  const env = fakeEnvironment({ path: '/opt/dp/bin/dp' });
  const ext = loadExtension(env);
  const context = { subscriptions: [] };
  await ext.activate(context);
  assert.equal(env.log.clients.length, 1);
  const client = env.log.clients[0];
  assert.equal(client.id, 'dp');
  assert.ok(client.running);
  for (const mode of ['run', 'debug']) {
    assert.equal(client.serverOptions[mode].command, '/opt/dp/bin/dp');
    assert.deepEqual(client.serverOptions[mode].args, ['lsp']);
    assert.equal(client.serverOptions[mode].transport, env.languageclient.TransportKind.stdio);
  }
  assert.ok(client.clientOptions.documentSelector.some((s) => s.language === 'dp' && s.scheme === 'file'));
  assert.ok(env.log.commands.has('dp.runFile'));
  assert.ok(env.log.commands.has('dp.restartServer'));
  assert.ok(context.subscriptions.length >= 3);

  await env.log.commands.get('dp.restartServer')();
  assert.equal(env.log.clients.length, 2);
  assert.ok(!client.running && env.log.clients[1].running);

  await ext.deactivate();
  assert.ok(!env.log.clients[1].running);
});

test('the server can be turned off', async () => {
  const env = fakeEnvironment({ 'server.enable': false });
  const ext = loadExtension(env);
  await ext.activate({ subscriptions: [] });
  assert.equal(env.log.clients.length, 0);
  await ext.deactivate();
});

test('dp.runFile saves the file and runs `dp run` on it in a terminal', async () => {
  const env = fakeEnvironment();
  const ext = loadExtension(env);
  await ext.activate({ subscriptions: [] });
  const doc = {
    languageId: 'dp',
    isUntitled: false,
    isDirty: true,
    uri: { fsPath: '/work/my project/main.dp' },
    save: async () => {
      env.log.saved += 1;
      return true;
    },
  };
  env.vscode.window.activeTextEditor = { document: doc };
  await env.log.commands.get('dp.runFile')();
  assert.equal(env.log.saved, 1);
  assert.deepEqual(env.log.terminalText, ['dp run "/work/my project/main.dp"']);
  await ext.deactivate();
});
