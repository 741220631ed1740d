import * as React from 'react';

import type { IStateModel } from '../../models/state';

/**
 * Follow the state of a model from a React component; `null` without a
 * model.
 */
export function useModelState<S>(model: IStateModel<S>): S;
export function useModelState<S>(model: IStateModel<S> | null): S | null;
export function useModelState<S>(model: IStateModel<S> | null): S | null {
  const [state, setState] = React.useState<S | null>(model?.state ?? null);
  React.useEffect(() => {
    if (!model) {
      setState(null);
      return;
    }
    const onChange = (_: unknown, next: S): void => {
      setState(next);
    };
    model.stateChanged.connect(onChange);
    setState(model.state);
    return () => {
      model.stateChanged.disconnect(onChange);
    };
  }, [model]);
  return state;
}
