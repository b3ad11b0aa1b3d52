#ifndef FERRY_CNOTIFY_SHIM_H
#define FERRY_CNOTIFY_SHIM_H
#include <libnotify/notify.h>

/* Typed stand-ins for GLib macros Swift cannot import. */

/* g_signal_connect is a macro over g_signal_connect_data, and its handler is an
   untyped GCallback: this one takes the "closed" signal's real signature. */
typedef void (*ferry_notification_closed_cb)(NotifyNotification *notification, gpointer user_data);

static inline gulong ferry_notification_connect_closed(NotifyNotification *notification,
                                                       ferry_notification_closed_cb handler,
                                                       gpointer user_data) {
    return g_signal_connect_data(notification, "closed", G_CALLBACK(handler), user_data, NULL, (GConnectFlags)0);
}

/* G_OBJECT() is a cast macro. */
static inline void ferry_notification_unref(NotifyNotification *notification) {
    g_object_unref(G_OBJECT(notification));
}

/* G_LOG_LEVEL_MASK and the flags are macros over an enum. */
static inline GLogLevelFlags ferry_g_log_all_levels(void) {
    return (GLogLevelFlags)(G_LOG_LEVEL_MASK | G_LOG_FLAG_FATAL | G_LOG_FLAG_RECURSION);
}

static inline gint ferry_g_priority_default(void) { return G_PRIORITY_DEFAULT; }
static inline gboolean ferry_g_source_remove(void) { return G_SOURCE_REMOVE; }

#endif
