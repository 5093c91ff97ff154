// VS Code client for dp: starts the language server `dp lsp` over stdio for .dp files and adds
// the commands "dp: Run File" and "dp: Restart Language Server".
// Highlighting comes from syntaxes/dp.tmLanguage.json and works without the server.
'use strict';

const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

/** @type {LanguageClient | undefined} */
let client;

function dpPath() {
  return vscode.workspace.getConfiguration('dp').get('path') || 'dp';
}

async function startClient(context) {
  if (!vscode.workspace.getConfiguration('dp').get('server.enable', true)) return;
  const command = dpPath();
  const serverOptions = {
    run: { command, args: ['lsp'], transport: TransportKind.stdio },
    debug: { command, args: ['lsp'], transport: TransportKind.stdio },
  };
  const clientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'dp' },
      { scheme: 'untitled', language: 'dp' },
    ],
    synchronize: {
      fileEvents: vscode.workspace.createFileSystemWatcher('**/*.dp'),
    },
  };
  // The id 'dp' makes the setting `dp.trace.server` control message tracing.
  client = new LanguageClient('dp', 'dp language server', serverOptions, clientOptions);
  try {
    await client.start();
  } catch (err) {
    client = undefined;
    vscode.window.showWarningMessage(
      `dp: could not start the language server (\`${command} lsp\`): ${err && err.message ? err.message : err}. ` +
        'Set "dp.path" to the dp executable, or "dp.server.enable" to false.'
    );
  }
}

async function stopClient() {
  if (!client) return;
  const c = client;
  client = undefined;
  await c.stop();
}

function quote(arg) {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(arg) ? arg : `"${arg.replace(/(["\\$`])/g, '\\$1')}"`;
}

async function runFile() {
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.languageId !== 'dp') {
    vscode.window.showInformationMessage('dp: open a .dp file to run it.');
    return;
  }
  const doc = editor.document;
  if (doc.isUntitled) {
    vscode.window.showInformationMessage('dp: save the file before running it.');
    return;
  }
  if (doc.isDirty) await doc.save();
  const terminal = vscode.window.terminals.find((t) => t.name === 'dp') || vscode.window.createTerminal('dp');
  terminal.show(true);
  terminal.sendText(`${quote(dpPath())} run ${quote(doc.uri.fsPath)}`);
}

async function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand('dp.runFile', runFile),
    vscode.commands.registerCommand('dp.restartServer', async () => {
      await stopClient();
      await startClient(context);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (e.affectsConfiguration('dp.path') || e.affectsConfiguration('dp.server.enable')) {
        await stopClient();
        await startClient(context);
      }
    })
  );
  await startClient(context);
}

function deactivate() {
  return stopClient();
}

module.exports = { activate, deactivate };
