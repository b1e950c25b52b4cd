//! SIGTERM, SIGINT and SIGHUP in the daemon.

use std::path::Path;

use novafs_fuse::Unmounter;

use super::sys;
use super::umount::kernel_unmount;

/// First signal: unmount the kernel mount, which ends the session and
/// leads to the clean unmount. If files are still open there, detach it
/// instead and finish when the last one is closed. Second signal: exit now
/// (a crash: the image is consistent and the next mount recovers).
pub(super) fn on_signals(signals: &sys::SignalSet, mut unmounter: Unmounter, mnt: &Path) {
    let mut seen = 0;
    loop {
        let sig = match signals.wait() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("sigwait: {e}");
                return;
            }
        };
        seen += 1;
        if seen > 1 {
            tracing::warn!("signal {sig} again: exiting without a clean unmount; the next mount recovers");
            std::process::exit(1);
        }
        tracing::info!("signal {sig}: unmounting {}", mnt.display());
        match unmounter.unmount() {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                tracing::warn!(
                    "{} is busy: detaching it; the daemon finishes when the last open file there is closed",
                    mnt.display()
                );
                if let Err(e) = kernel_unmount(mnt, true) {
                    tracing::error!("cannot detach {}: {e}", mnt.display());
                }
            }
            Err(e) => tracing::error!("cannot unmount {}: {e}", mnt.display()),
        }
    }
}
