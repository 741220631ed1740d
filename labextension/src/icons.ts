import { LabIcon } from '@jupyterlab/ui-components';

/**
 * A chip with pins on four sides. `jp-icon3` lets the theme recolour it.
 */
const CHIP_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path fill-rule="evenodd" d="M6 5h12a1 1 0 0 1 1 1v12a1 1 0 0 1-1 1H6a1 1 0 0 1-1-1V6a1 1 0 0 1 1-1zm1.5 2.5v9h9v-9z"/>
    <rect x="9.5" y="9.5" width="5" height="5" rx="0.5"/>
    <rect x="8" y="1.5" width="1.6" height="3"/>
    <rect x="11.2" y="1.5" width="1.6" height="3"/>
    <rect x="14.4" y="1.5" width="1.6" height="3"/>
    <rect x="8" y="19.5" width="1.6" height="3"/>
    <rect x="11.2" y="19.5" width="1.6" height="3"/>
    <rect x="14.4" y="19.5" width="1.6" height="3"/>
    <rect x="1.5" y="8" width="3" height="1.6"/>
    <rect x="1.5" y="11.2" width="3" height="1.6"/>
    <rect x="1.5" y="14.4" width="3" height="1.6"/>
    <rect x="19.5" y="8" width="3" height="1.6"/>
    <rect x="19.5" y="11.2" width="3" height="1.6"/>
    <rect x="19.5" y="14.4" width="3" height="1.6"/>
  </g>
</svg>`;

export const chipIcon = new LabIcon({
  name: 'jupyter-gpudev:chip',
  svgstr: CHIP_SVG
});
