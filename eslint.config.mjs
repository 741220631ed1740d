// ESLint flat config for the TypeScript sources of the Lab extension.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'lib/',
      'node_modules/',
      'jupyter_gpudev/labextension/',
      'labextension/ui-tests/test-results/',
      'labextension/ui-tests/playwright-report/',
      '**/playwright-report/',
      '**/test-results/',
      '.venv/',
      'eslint.config.mjs'
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      globals: { ...globals.browser },
      parserOptions: {
        projectService: {
          allowDefaultProject: [
            'labextension/style/index.js',
            'labextension/ui-tests/playwright.config.js'
          ]
        },
        tsconfigRootDir: import.meta.dirname
      }
    },
    rules: {
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true }
      ],
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { args: 'none', ignoreRestSiblings: true }
      ],
      eqeqeq: ['error', 'smart'],
      curly: ['error', 'all']
    }
  },
  {
    // Plain JavaScript (CommonJS config files and the style entry point).
    files: ['**/*.js', '**/*.cjs'],
    ...tseslint.configs.disableTypeChecked
  },
  {
    files: ['labextension/ui-tests/**/*.js', '**/*.cjs'],
    languageOptions: {
      sourceType: 'commonjs',
      globals: { ...globals.node }
    },
    rules: {
      '@typescript-eslint/no-require-imports': 'off'
    }
  },
  prettier
);
