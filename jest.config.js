/**
 * Jest configuration of the unit tests of the Lab extension
 * (labextension/test/*.spec.ts, and *.spec.tsx for the components, rendered
 * with React's act and createRoot through labextension/test/dom.tsx):
 * JupyterLab's own configuration (jsdom, fetch and the other shims),
 * compiled with labextension/test/tsconfig.json.
 * JupyterLab's packages that ship ES modules (cells, rendermime, ...: the
 * output trust tests use their real models) are compiled by babel-jest with
 * JupyterLab's babel configuration.
 */
const jestJupyterLab = require('@jupyterlab/testing/lib/jest-config');
const babelConfig = require('@jupyterlab/testing/lib/babel-config').default;

const base = jestJupyterLab(__dirname);

/** The ES-module packages of JupyterLab's list, and JupyterLab's own. */
const esModules = [
  '@codemirror',
  '@marijn',
  '@microsoft',
  '@jupyter/react-components',
  '@jupyter/web-components',
  '@jupyter/ydoc',
  '@jupyterlab/',
  'color',
  'exenv-es6',
  'lib0',
  'marked',
  'nanoid',
  'vscode-ws-jsonrpc',
  'y-protocols',
  'y-websocket',
  'yjs'
].join('|');

module.exports = {
  ...base,
  roots: ['<rootDir>/labextension/test'],
  testRegex: 'labextension/test/.*\\.spec\\.tsx?$',
  // No junit.xml or GitHub annotations: the default reporter only.
  reporters: ['default'],
  transform: {
    ...base.transform,
    '^.+\\.tsx?$': [
      'ts-jest',
      { tsconfig: '<rootDir>/labextension/test/tsconfig.json' }
    ],
    '^.+\\.jsx?$': ['babel-jest', babelConfig]
  },
  transformIgnorePatterns: [`/node_modules/(?!${esModules}).+`]
};
