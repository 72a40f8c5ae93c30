"""The DataLoader hooks: every batch's wait is the "data" phase, and its
first tensor's first dimension counts as samples (tokens: numel of a dict
batch's "input_ids", or of a first tensor of token ids: signed integers,
[batch, length, ...]). The auto hook's first batch may begin the first step.

Used by the auto hook (_autohook.patch_torch) and by the Lightning / HF
callbacks; the state it keeps is _state's (st.samples, st.tokens,
st.in_data). Never raises into the training loop.
"""
from trainperf import _state

_dataloader_patched = False


def _token_ids(t):
    """A [batch, length] tensor of signed integers: token ids (not floats,
    not uint8 image bytes, not bool masks)."""
    d = t.dtype
    return d.is_signed and not d.is_floating_point and not d.is_complex


def _batch_size(batch, torch_tensor, depth=0):
    """(samples, tokens) of a batch: first dim of its first tensor; tokens
    when that tensor is token ids (integers, [batch, length])."""
    if isinstance(batch, torch_tensor):
        if batch.dim() >= 2 and _token_ids(batch):
            return int(batch.shape[0]), int(batch.numel())
        return (int(batch.shape[0]) if batch.dim() > 0 else 0), 0
    if depth > 3:
        return 0, 0
    if isinstance(batch, dict):
        ids = batch.get("input_ids")
        if isinstance(ids, torch_tensor) and ids.dim() > 0:
            return int(ids.shape[0]), (int(ids.numel()) if ids.dim() >= 2 else 0)
        for v in batch.values():
            s, t = _batch_size(v, torch_tensor, depth + 1)
            if s:
                return s, t
        return 0, 0
    if isinstance(batch, (list, tuple)):
        for v in batch[:4]:
            s, t = _batch_size(v, torch_tensor, depth + 1)
            if s:
                return s, t
    return 0, 0


def take_batch_counts():
    """(samples, tokens) seen in DataLoader batches on this thread since the
    last call (callbacks use it to fill their steps)."""
    st = _state.st
    s, t = st.samples, st.tokens
    st.samples = st.tokens = 0
    return s, t


def patch_dataloader(torch=None):
    """Time every DataLoader batch as the "data" phase and count its samples.
    Idempotent; used by the auto hook and by the Lightning / HF callbacks."""
    global _dataloader_patched
    if _dataloader_patched:
        return
    _dataloader_patched = True
    if torch is None:
        import torch
    from torch.utils.data import dataloader as dl
    core = _state.core
    push, pop = core.range_push, core.range_pop
    st = _state.st
    tensor_type = torch.Tensor
    seq_types = (tuple, list)
    base_iter = dl._BaseDataLoaderIter
    orig_next = base_iter.__next__

    ev = _state.ev
    c_hooks = _state.c_hooks()
    begin_if_closed = _state.begin_if_closed

    if c_hooks is not None:
        # the same in C (_core.c, data_next): no Python frame per batch;
        # batches other than (tensor, ...) are counted here
        def count(batch):
            s, t = _batch_size(batch, tensor_type)
            st.samples += s
            st.tokens += t

        next_c = c_hooks.data_next(orig_next, ev, begin_if_closed, count, tensor_type)
        next_c.__wrapped__ = orig_next
        next_c.__doc__ = orig_next.__doc__
        base_iter.__next__ = next_c
        return

    def next_timed(self):
        if not st.open and _state.auto_steps:
            begin_if_closed()
        if ev.active:
            # an evaluation's batches are the evaluation's time, not a
            # training data wait, and not training samples
            return orig_next(self)
        st.in_data += 1
        push(1)  # TPF_PHASE_DATA
        try:
            batch = orig_next(self)
        except StopIteration:
            core.loop_end(1)  # TPF_LOOP_DONE: the training data ran out
            raise
        finally:
            pop()
            st.in_data -= 1
        try:
            # the common batch, (tensor, ...): no call into _batch_size
            if type(batch) in seq_types and batch and isinstance(batch[0], tensor_type) \
                    and batch[0].dim() == 1:
                st.samples += batch[0].shape[0]
            else:
                s, t = _batch_size(batch, tensor_type)
                st.samples += s
                st.tokens += t
        except Exception:
            pass
        return batch

    next_timed.__wrapped__ = orig_next
    base_iter.__next__ = next_timed
