//! Integration tests of `rstar-http`: request heads timed by progress.

mod http {
    mod heads;
}
