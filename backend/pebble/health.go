package pebble

// Err reports the error that broke the store, wrapping ErrStoreFailed, once one did,
// and nil while the store works. A broken store refuses every operation until it is
// reopened, so a host polls Err to stop calling itself healthy and to exit.
func (b *Backend) Err() error {
	if p := b.failed.Load(); p != nil {
		return *p
	}
	return nil
}
