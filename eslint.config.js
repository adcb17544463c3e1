// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * The folder tree is the pipeline (STYLE.md rule 1): a layer imports only earlier layers, and only
 * through their index.ts. `cli/` and `server/` are the composition roots.
 */
const layers = [
  ['runner', 'policy'],
  ['facts', 'state'],
  ['ir'],
  ['backends'],
  ['apply'],
  // The library layer: a host or namespace to act on, and a policy prepared for it.
  ['host'],
  // prove applies with the real applier and watches with the real resident mode (DESIGN.md §7).
  ['prove', 'fleet'],
  // The agent speaks the fleet's protocol (wire schemas, failure budget, controller connection).
  ['agent'],
  // The server composes fleet and agent; the CLI's `server` and `fleet` commands start and call it.
  ['server'],
  ['cli'],
];
const allLayers = layers.flat();

function rulesFor(layer) {
  const rank = layers.findIndex((group) => group.includes(layer));
  const later = layers
    .slice(rank)
    .flat()
    .filter((l) => l !== layer);
  const others = allLayers.filter((l) => l !== layer);
  return {
    files: [`src/${layer}/**/*.ts`],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            ...(later.length > 0
              ? [
                  {
                    regex: `^(\\.\\./)+(${later.join('|')})(/|$)`,
                    message: `"${layer}" must not import a later or sibling layer (STYLE.md rule 1)`,
                  },
                ]
              : []),
            {
              regex: `^(\\.\\./)+(${others.join('|')})/(?!index\\.js$).+`,
              message: 'Import another layer only through its index.ts',
            },
          ],
        },
      ],
    },
  };
}

export default tseslint.config(
  { ignores: ['dist/**', 'sim/dist/**', 'node_modules/**', 'bench-out/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/restrict-template-expressions': [
        'error',
        { allowNumber: true, allowBoolean: true },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        URL: 'readonly',
        performance: 'readonly',
      },
    },
  },
  ...allLayers.map(rulesFor),
  {
    // The simulators are test-only: the product never imports them (tests beside it may).
    files: ['src/**/*.ts'],
    ignores: ['src/**/*.test.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        ...[
          'ImportDeclaration',
          'ExportNamedDeclaration',
          'ExportAllDeclaration',
          'ImportExpression',
        ].map((node) => ({
          selector: `${node}[source.value=/^(\\.\\.\\/)+sim\\//]`,
          message: 'The product never imports the simulators (sim/): they are test-only',
        })),
      ],
    },
  },
);
