/**
 * The part of `react-dom/client` (React 18, installed with JupyterLab) the
 * component tests use; the project does not depend on `@types/react-dom`.
 */
declare module 'react-dom/client' {
  import type { ReactNode } from 'react';

  export interface Root {
    render(children: ReactNode): void;
    unmount(): void;
  }

  export function createRoot(container: Element | DocumentFragment): Root;
}
