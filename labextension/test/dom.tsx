/**
 * Rendering React components into jsdom for their tests, with React's own
 * `act` and `createRoot` (no DOM testing library): render, find by test id
 * or text, click, type, choose.
 */
import { nullTranslator } from '@jupyterlab/translation';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';
import { act } from 'react';
import { createRoot } from 'react-dom/client';
import type { Root } from 'react-dom/client';

// Tell React that updates in these tests are wrapped in `act`.
(
  globalThis as typeof globalThis & { IS_REACT_ACT_ENVIRONMENT?: boolean }
).IS_REACT_ACT_ENVIRONMENT = true;

/** The translation bundle of the components: the text as written. */
export const trans: TranslationBundle = nullTranslator.load('jupyterlab');

/** A class of elements, such as `HTMLInputElement`. */
export interface ElementKind<E extends HTMLElement> {
  new (): E;
  prototype: E;
}

/** A class of elements, such as `HTMLInputElement`. */
export interface IElementKind<E extends HTMLElement> {
  new (): E;
  prototype: E;
}

/** A component rendered into a detached `div` of the document. */
export interface IRendered {
  /** The element the component was rendered into. */
  readonly container: HTMLElement;
  /** Render another element (new props) into the same root. */
  rerender: (element: React.ReactElement) => void;
  /** The element with this `data-testid`; fails the test when absent. */
  get: (testId: string) => HTMLElement;
  /** The `kind` of element with this `data-testid`; fails when absent. */
  getAs: <E extends HTMLElement>(testId: string, kind: IElementKind<E>) => E;
  /** The element with this `data-testid`, or `null`. */
  query: (testId: string) => HTMLElement | null;
  /** The text the user reads (whitespace collapsed). */
  text: () => string;
}

const mounted: { root: Root; container: HTMLElement }[] = [];

afterEach(() => {
  for (const { root, container } of mounted.splice(0)) {
    act(() => {
      root.unmount();
    });
    container.remove();
  }
});

/** Render `element` (unmounted after the test). */
export function render(element: React.ReactElement): IRendered {
  const container = document.createElement('div');
  document.body.appendChild(container);
  const root = createRoot(container);
  mounted.push({ root, container });
  act(() => {
    root.render(element);
  });
  const query = (testId: string): HTMLElement | null =>
    container.querySelector<HTMLElement>(`[data-testid="${testId}"]`);
  const get = (testId: string): HTMLElement => {
    const found = query(testId);
    if (!found) {
      throw new Error(`No element with data-testid "${testId}"`);
    }
    return found;
  };
  return {
    container,
    rerender: next => {
      act(() => {
        root.render(next);
      });
    },
    get,
    getAs: (testId, kind) => {
      const found = get(testId);
      if (!(found instanceof kind)) {
        throw new Error(`"${testId}" is a ${found.tagName}`);
      }
      return found;
    },
    query,
    text: () => collapse(container.textContent)
  };
}

/** `text` with its runs of whitespace as one space, trimmed. */
export function collapse(text: string | null | undefined): string {
  return (text ?? '').replace(/\s+/g, ' ').trim();
}

/** The buttons of `root` by the text they show. */
export function buttonTexts(root: HTMLElement): string[] {
  return [...root.querySelectorAll('button')].map(button =>
    collapse(button.textContent)
  );
}

/** Click `element` as a user would (a checkbox toggles). */
export function click(element: HTMLElement): void {
  act(() => {
    element.click();
  });
}

/**
 * Type `value` into an input or a text area: the value set the way React
 * notices (through the prototype's setter), then an `input` event.
 */
export function type(
  element: HTMLInputElement | HTMLTextAreaElement,
  value: string
): void {
  const prototype =
    element instanceof HTMLTextAreaElement
      ? HTMLTextAreaElement.prototype
      : HTMLInputElement.prototype;
  act(() => {
    Object.getOwnPropertyDescriptor(prototype, 'value')?.set?.call(
      element,
      value
    );
    element.dispatchEvent(new Event('input', { bubbles: true }));
  });
}

/** Choose the option of `value` in a select. */
export function choose(element: HTMLSelectElement, value: string): void {
  act(() => {
    Object.getOwnPropertyDescriptor(
      HTMLSelectElement.prototype,
      'value'
    )?.set?.call(element, value);
    element.dispatchEvent(new Event('change', { bubbles: true }));
  });
}

/** Press a key on `element`; returns whether the default was prevented. */
export function press(element: HTMLElement, key: string): boolean {
  const event = new KeyboardEvent('keydown', {
    key,
    bubbles: true,
    cancelable: true
  });
  act(() => {
    element.dispatchEvent(event);
  });
  return event.defaultPrevented;
}

/** Submit the form of `element` (Enter in one of its fields). */
export function submit(element: HTMLElement): void {
  const form = element.closest('form');
  if (!form) {
    throw new Error('The element is not in a form');
  }
  act(() => {
    form.dispatchEvent(
      new Event('submit', { bubbles: true, cancelable: true })
    );
  });
}
