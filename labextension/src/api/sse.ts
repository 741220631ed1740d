/**
 * Streamed work (a start, a commit): a POST answered with server-sent
 * events, `progress` ones up to a `result` or an `error`.
 */
import type { ServerConnection } from '@jupyterlab/services';

import type { IStartProgress } from '../types';
import {
  checkShape,
  describe,
  GPUDevAPIError,
  INVALID_RESPONSE,
  NETWORK_ERROR
} from './errors';
import { finiteOrNull, isRecord, parseJSON } from './json';
import { readText, send, throwUnlessOK } from './request';

/** How `requestStreamed` reads one kind of streamed work. */
export interface IStreamOptions<T> {
  /** The work, for messages: `starting "gpu"`. */
  what: string;
  /** Said after a broken connection: what the user can do. */
  broken: string;
  /** Said when the stream ends without a result or an error. */
  unfinished: string;
  /** Said for an `error` event without a message. */
  failed: string;
  /** The value of a `result` event, or `null` when it has the wrong shape. */
  result: (value: unknown) => T | null;
  /** What the result is, for the error of a result of the wrong shape. */
  resultName: string;
  /** What a plain (not streamed) answer should have been, for its error. */
  plainName: string;
  onProgress?: (progress: IStartProgress) => void;
  /** Stops reading the progress (the work itself goes on on the server). */
  signal?: AbortSignal;
  settings?: ServerConnection.ISettings;
}

/**
 * POST `body` to `path` asking for server-sent events and follow them up
 * to the `result` (a server that does not stream answers it as JSON).
 *
 * @throws {GPUDevAPIError} for an `error` event, an error status, or a
 *   stream that broke or ended without a result.
 */
export async function requestStreamed<T>(
  path: readonly string[],
  body: unknown,
  options: IStreamOptions<T>
): Promise<T> {
  const { url, response } = await send(path, {
    init: {
      method: 'POST',
      body: JSON.stringify(body),
      headers: {
        Accept: 'text/event-stream',
        'Content-Type': 'application/json'
      },
      signal: options.signal
    },
    settings: options.settings
  });
  await throwUnlessOK(response);
  const type = response.headers.get('Content-Type') ?? '';
  if (type.includes('text/event-stream') && response.body !== null) {
    return readEventStream(response.body, options);
  }
  const plain = parseJSON(await readText(response));
  return checkShape(
    plain.parsed ? plain.value : undefined,
    options.result,
    options.plainName,
    {
      status: response.status,
      message: `The server answered ${url} with neither progress events nor ${options.plainName}.`
    }
  );
}

/**
 * Read the server-sent events of streamed work up to its `result` or
 * `error`, reporting each `progress` event on the way.
 */
async function readEventStream<T>(
  stream: ReadableStream<Uint8Array>,
  options: IStreamOptions<T>
): Promise<T> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  const parser = new SSEParser();
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (reason) {
        throw new GPUDevAPIError({
          status: 0,
          code: NETWORK_ERROR,
          message: `The connection to the Jupyter server broke while ${options.what} (${describe(reason)}). ${options.broken}`
        });
      }
      const events = chunk.done
        ? [...parser.push(decoder.decode()), ...parser.end()]
        : parser.push(decoder.decode(chunk.value, { stream: true }));
      for (const event of events) {
        const outcome = eventOutcome(event, options);
        if (outcome !== undefined) {
          return outcome;
        }
      }
      if (chunk.done) {
        throw new GPUDevAPIError({
          status: 200,
          code: INVALID_RESPONSE,
          message: options.unfinished
        });
      }
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

/**
 * Apply one event of a stream: report `progress`, return the value of
 * `result`, throw the error of `error`; `undefined` for anything else.
 */
function eventOutcome<T>(
  event: IServerSentEvent,
  options: IStreamOptions<T>
): T | undefined {
  const data = parseJSON(event.data);
  const value = data.parsed ? data.value : undefined;
  switch (event.event) {
    case 'progress':
      if (
        isRecord(value) &&
        typeof value.stage === 'string' &&
        typeof value.message === 'string'
      ) {
        options.onProgress?.({
          stage: value.stage,
          message: value.message,
          current: finiteOrNull(value.current),
          total: finiteOrNull(value.total)
        });
      }
      return undefined;
    case 'result':
      return checkShape(value, options.result, options.resultName);
    case 'error': {
      const body = isRecord(value) ? value : {};
      throw new GPUDevAPIError({
        status:
          typeof body.status === 'number' && body.status > 0
            ? body.status
            : 500,
        code: typeof body.error === 'string' ? body.error : 'internal',
        message:
          typeof body.message === 'string' && body.message
            ? body.message
            : options.failed,
        details: isRecord(body.details) ? body.details : null
      });
    }
    default:
      return undefined;
  }
}

/** One server-sent event: its type (`message` when unnamed) and data. */
export interface IServerSentEvent {
  event: string;
  data: string;
}

/**
 * Splits a `text/event-stream` body into events. Feed it text as it arrives;
 * an event is complete at the blank line that ends it. Comments and fields
 * other than `event` and `data` are skipped.
 */
export class SSEParser {
  /** Add text; returns the events it completed. */
  push(text: string): IServerSentEvent[] {
    let chunk = this._carriage + text;
    this._carriage = '';
    if (chunk.endsWith('\r')) {
      // Maybe the first half of a CRLF: wait for the next chunk.
      this._carriage = '\r';
      chunk = chunk.slice(0, -1);
    }
    this._buffer += chunk.replace(/\r\n?/g, '\n');
    const events: IServerSentEvent[] = [];
    let end = this._buffer.indexOf('\n\n');
    while (end !== -1) {
      const event = parseEventBlock(this._buffer.slice(0, end));
      this._buffer = this._buffer.slice(end + 2);
      if (event) {
        events.push(event);
      }
      end = this._buffer.indexOf('\n\n');
    }
    return events;
  }

  /** The stream ended: returns the last event if it lacked its blank line. */
  end(): IServerSentEvent[] {
    const rest = (this._buffer + this._carriage).replace(/\r\n?/g, '\n');
    this._buffer = '';
    this._carriage = '';
    const event = parseEventBlock(rest.replace(/\n+$/, ''));
    return event ? [event] : [];
  }

  private _buffer = '';
  private _carriage = '';
}

function parseEventBlock(block: string): IServerSentEvent | null {
  let event = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) {
      continue;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'event') {
      event = value || 'message';
    } else if (field === 'data') {
      data.push(value);
    }
  }
  return data.length > 0 ? { event, data: data.join('\n') } : null;
}
