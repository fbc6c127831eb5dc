// ESLint (flat config) for the page's script, views/js/*.js; tests/test_js_lint.py runs it, .ci/run installs ESLint
// in ~/.cache/eagle-lens/eslint (outside the repository, so nothing here is resolved from node_modules of ours).
//
// The files are plain browser scripts, not modules: views/page.py pastes them, in order, into the one function it
// hands to Gradio (launch(js=...)), so they share one scope. A name one file defines for another is marked
// `/* exported name */` where it is defined and `/* global name */` where it is used; the test also lints the
// assembled function, where a name that no file defines is an error.
import {createRequire} from 'node:module';

// @eslint/js sits beside the eslint that loads this file (process.argv[1] is its bin script)
const require = createRequire(process.argv[1]);
const js = require('@eslint/js');

// what the page's script may use without defining it: the browser's, and Plotly (window.Plotly, loaded by Gradio)
const browser = Object.fromEntries([
  'window', 'document', 'console', 'Date', 'Event', 'MutationObserver', 'ResizeObserver', 'requestAnimationFrame',
  'setTimeout', 'Plotly',
].map((name) => [name, 'readonly']));

export default [
  js.configs.recommended,
  {
    files: ['**/*.js'],
    languageOptions: {ecmaVersion: 2022, sourceType: 'script', globals: browser},
    rules: {
      'max-lines': ['error', {max: 500}],
      'max-lines-per-function': ['error', {max: 80}],
    },
  },
  {
    files: ['**/*.mjs'],
    languageOptions: {globals: {process: 'readonly'}},
  },
];
