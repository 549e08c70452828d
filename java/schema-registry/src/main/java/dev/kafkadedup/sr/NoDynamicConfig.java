package dev.kafkadedup.sr;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/** The (empty) list of dynamic config properties the config-index extension would build. */
@ApplicationScoped
public class NoDynamicConfig {
    @Produces
    @ApplicationScoped
    public DynamicConfigPropertyList properties() {
        return new DynamicConfigPropertyList(java.util.List.of());
    }
}
