#include "daemon/systemd_notify.h"

#if COLLECTIVED_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace collectived::daemon {

#if COLLECTIVED_HAVE_SYSTEMD
void NotifyReady() { sd_notify(0, "READY=1\nSTATUS=serving"); }
void NotifyStopping() { sd_notify(0, "STOPPING=1\nSTATUS=draining"); }
void NotifyWatchdog() { sd_notify(0, "WATCHDOG=1"); }
int64_t WatchdogIntervalNs() {
  uint64_t usec = 0;
  return sd_watchdog_enabled(0, &usec) > 0 ? static_cast<int64_t>(usec) * 1000 : 0;
}
#else
void NotifyReady() {}
void NotifyStopping() {}
void NotifyWatchdog() {}
int64_t WatchdogIntervalNs() { return 0; }
#endif

}  // namespace collectived::daemon
