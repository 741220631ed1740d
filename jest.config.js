/**
 * Jest configuration of the unit tests of the Lab extension
 * (labextension/test/*.spec.ts): JupyterLab's own configuration (jsdom,
 * fetch and the other shims), compiled with labextension/test/tsconfig.json.
 */
const jestJupyterLab = require('@jupyterlab/testing/lib/jest-config');

const base = jestJupyterLab(__dirname);

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
    ]
  }
};
