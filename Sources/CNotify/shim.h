#ifndef FERRY_CNOTIFY_SHIM_H
#define FERRY_CNOTIFY_SHIM_H
#include <libnotify/notify.h>
#endif
